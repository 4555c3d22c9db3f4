"""Episodes as the report shows them, and the config table of several runs.

An episode becomes a compact record: where it came from (held-out evaluation or a
training rollout, at which step), its task, won/lost, return, and its turns (what the
agent saw, what it generated, the parsed action, the reward, whether the action was
valid). Long texts are cut at `max_chars` so a page of many episodes stays quick to
open. `pairs` matches held-out episodes of the same task at the first and the last
evaluation: the evaluation tasks are the same seeds every time, so this is the agent
before and after RL on identical puzzles.
"""

from __future__ import annotations

import json
from typing import Any

from arborl.report.load import RunData


def cut(text: Any, max_chars: int) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= max_chars else text[:max_chars] + f" … (+{len(text) - max_chars})"


def part_text(part: Any) -> str:
    """One content part as text: its `text`, else `[its type]`."""
    if isinstance(part, dict):
        return str(part["text"]) if "text" in part else f"[{part.get('type', 'part')}]"
    return str(part)


def content_text(content: Any) -> str:
    """A message's content as text: a string as it is; OpenAI content parts (a list, or
    its JSON as an agent's observation holds it) as their texts joined, other parts as
    `[type]`."""
    if isinstance(content, str):
        stripped = content.lstrip()
        if not stripped.startswith("[{"):
            return content
        try:
            content = json.loads(content)
        except json.JSONDecodeError:
            return content
    if isinstance(content, list):
        return "\n".join(part_text(p) for p in content)
    return "" if content is None else str(content)


def seen_text(messages: Any) -> str:
    """What the model saw in a call: each message as `role: text`, tool calls named."""
    if not isinstance(messages, list):
        return ""
    lines = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        text = content_text(m.get("content"))
        tool_calls = [c for c in m.get("tool_calls") or [] if isinstance(c, dict)]
        calls = [c.get("function", {}).get("name", "?") for c in tool_calls]
        if calls:
            text += f" [calls {', '.join(calls)}]"
        lines.append(f"{m.get('role', '?')}: {text}")
    return "\n".join(lines)


def episode_record(run: str, source: str, step: int, t: dict, max_chars: int) -> dict:
    """One episode of trajectory record `t` (`arborl.data.Trajectory.to_dict`)."""
    turns = []
    for s in t.get("steps", []):
        info = s.get("info") or {}
        turns.append(
            {
                "obs": cut(content_text(s.get("observation")), max_chars),
                "seen": cut(seen_text(info.get("messages")), 4 * max_chars),
                "response": cut(s.get("response") or s.get("action"), max_chars),
                "action": cut(s.get("action"), 200),
                "reward": float(s.get("reward") or 0.0),
                "valid": bool(info.get("valid_action", True)),
            }
        )
    ret = t.get("total_return", sum(turn["reward"] for turn in turns))
    return {
        "run": run,
        "source": source,
        "step": int(step),
        "task": str(t.get("task_id", "")),
        "won": bool(t.get("won", False)),
        "return": float(ret),
        "instruction": cut(t.get("instruction"), max_chars),
        "turns": turns,
    }


def build_episodes(runs: list[RunData], max_chars: int = 1500) -> list[dict]:
    """Every sampled episode of `runs` (held-out ones first), as `episode_record`s."""
    out = []
    for run in runs:
        for source, by_step in (("eval", run.eval_episodes), ("train", run.train_episodes)):
            for step, records in sorted(by_step.items()):
                out += [episode_record(run.name, source, step, t, max_chars) for t in records]
    return out


def pairs(episodes: list[dict]) -> list[dict]:
    """[{run, task, before, after}]: indices into `episodes` of one task's held-out
    episode at the run's first and last evaluation (tasks found at both). A task drawn k
    times at an evaluation (a task file may repeat one) gives k pairs, its j-th episode at
    the first evaluation with its j-th at the last."""
    out = []
    for run in dict.fromkeys(e["run"] for e in episodes):
        steps = sorted({e["step"] for e in episodes if e["run"] == run and e["source"] == "eval"})
        if len(steps) < 2:
            continue
        first, last = steps[0], steps[-1]
        at: dict[tuple[int, str], list[int]] = {}
        for i, e in enumerate(episodes):
            if e["run"] == run and e["source"] == "eval" and e["step"] in (first, last):
                at.setdefault((e["step"], e["task"]), []).append(i)
        for (step, task), befores in at.items():
            if step != first:
                continue
            for before, after in zip(befores, at.get((last, task), [])):
                out.append({"run": run, "task": task, "before": before, "after": after})
    return out


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1} (lists kept as values)."""
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def config_diff(runs: list[RunData]) -> list[dict[str, Any]]:
    """[{key, values: [one per run]}] of the config keys whose values differ (a key a
    run lacks shows as None)."""
    flat = [flatten(r.config) for r in runs]
    keys = sorted({k for f in flat for k in f})
    rows = []
    for k in keys:
        values = [f.get(k) for f in flat]
        if any(v != values[0] for v in values[1:]):
            rows.append({"key": k, "values": values})
    return rows
