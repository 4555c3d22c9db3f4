"""Readers and writers between `Trajectory` and the formats agent data arrives in.

    sharegpt  {"id", "conversations": [{"from": system|human|gpt, "value", "loss"?}]}
              (ShareGPT / AgentInstruct / AgentGym; `loss` marks turns to train on)
    openai    {"messages": [{"role": system|user|assistant|tool, "content", "weight"?}]}
    verl      parquet rows {data_source, prompt, ability, reward_model, extra_info}
              (task prompts; `extra_info.conversations` in OpenManus-RL files is read too)
    arborl    `Trajectory.to_dict()` rows (JSONL) or `write_trajectories` parquet

Formats live in a registry keyed by name (`FORMATS`), each with a `detect(row)` used by
`format: auto`, a `parse(row, source) -> Trajectory` that raises `FieldError` naming the
bad field, and a `write(path, trajectories, action_format)` that returns the trajectory
fields the format could not hold (and warns with `LossyExportWarning` naming them), so a
round trip through any format keeps the conversation text exactly and says what it lost.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from arborl.curate.config import SourceConfig
from arborl.curate.records import (
    FieldError,
    action_of,
    atomic_write,
    build_trajectory,
    messages_to_parts,
    prompt_text,
    trajectory_to_messages,
)
from arborl.data import Step, Trajectory
from arborl.data.tasks import task_table
from arborl.registry import Registry


class LossyExportWarning(UserWarning):
    """A format cannot hold some fields of the trajectories written to it."""


@dataclass(frozen=True)
class Format:
    name: str
    detect: Callable[[dict], bool]
    parse: Callable[[dict, SourceConfig], Trajectory]
    write: Callable[[Path, Sequence[Trajectory], str], list[str]]


FORMATS: Registry[Format] = Registry(
    "format", message="unknown {what} {name}; known: {known}.{hint}"
)
"""Row formats by name (`detect_format` tries them in registration order)."""


def get_format(name: str) -> Format:
    return FORMATS.get(name)


def detect_format(row: dict) -> str:
    """The name of the first format whose `detect` accepts `row`; raises `FieldError`."""
    for name in FORMATS.in_order():
        if FORMATS.get(name).detect(row):
            return name
    raise FieldError("(row)", f"matches no known format; its keys are {sorted(row)[:8]}")


# --- shared helpers --------------------------------------------------------------------
def derived_task_id(t: Trajectory) -> str:
    """A stable id for a row that has none: a hash of its task text."""
    return "sha1:" + hashlib.sha1(prompt_text(t).encode()).hexdigest()[:12]


def _won(row: dict, source: SourceConfig) -> bool:
    if source.won is not None:
        return source.won
    value = row.get("won", row.get("success", False))
    if not (isinstance(value, bool) or (isinstance(value, int | float) and value in (0, 1))):
        raise FieldError("won", f"expected a bool (or 0/1), got {value!r:.40}")
    return bool(value)


def _check_number(field_name: str, value: Any) -> None:
    """A finite int or float (not a bool, a string or NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FieldError(field_name, f"expected a finite number, got {value!r:.40}")


def _check_arborl_types(row: dict) -> None:
    """The typed fields of an arborl row (the `Trajectory`/`Step` schema), so that a bad
    value is a counted malformed row, never read as a different one."""
    for key, tp in (("task_id", str), ("env_id", str), ("steps", list), ("meta", dict),
                    ("instruction", str)):  # fmt: skip
        if key in row and not isinstance(row[key], tp):
            raise FieldError(key, f"expected {tp.__name__}, got {row[key]!r:.40}")
    won = row.get("won", False)
    if not (isinstance(won, bool) or (isinstance(won, int | float) and won in (0, 1))):
        raise FieldError("won", f"expected a bool (or 0/1), got {won!r:.40}")
    seed = row.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise FieldError("seed", f"expected an int or null, got {seed!r:.40}")
    for i, s in enumerate(row.get("steps", [])):
        if not isinstance(s, dict):
            raise FieldError(f"steps[{i}]", f"expected an object, got {s!r:.40}")
        for key in ("observation", "action"):
            if not isinstance(s.get(key), str):
                raise FieldError(f"steps[{i}].{key}", f"expected a string, got {s.get(key)!r:.40}")
        if "reward" in s:
            _check_number(f"steps[{i}].reward", s["reward"])
        for key, tp in (("terminated", bool), ("truncated", bool), ("info", dict)):
            if key in s and not isinstance(s[key], tp):
                raise FieldError(f"steps[{i}].{key}", f"expected {tp.__name__}, got {s[key]!r:.40}")
        if s.get("response") is not None and not isinstance(s["response"], str):
            raise FieldError(
                f"steps[{i}].response", f"expected a string, got {s['response']!r:.40}"
            )


def _row_split(row: dict) -> dict:
    """A row's own split label (many published files carry one) as `source_split`."""
    split = row.get("split")
    return {"source_split": split} if isinstance(split, str) and split else {}


def lost_fields(trajs: Sequence[Trajectory], holds: set[str], action_format: str) -> list[str]:
    """Names of fields with content that a format holding `holds` drops."""
    lost: set[str] = set()
    for t in trajs:
        tops = {"task_id": bool(t.task_id), "env_id": bool(t.env_id), "seed": t.seed is not None,
                "won": t.won, "instruction": bool(t.instruction)}  # fmt: skip
        lost |= {k for k, has in tops.items() if has and k not in holds}
        for s in t.steps:
            flags = {"steps[].reward": s.reward != 0, "steps[].terminated": s.terminated,
                     "steps[].truncated": s.truncated, "steps[].info": bool(s.info)}  # fmt: skip
            lost |= {k for k, has in flags.items() if has and k not in holds}
            if s.response is not None and action_of(s.response, action_format)[0] != s.action:
                lost.add("steps[].action")
            if "steps" not in holds and "steps" not in lost:
                lost.add("steps")
        keep = {"turn_loss", "final_observation"} | {k[5:] for k in holds if k.startswith("meta.")}
        lost |= {f"meta.{k}" for k in t.meta if k not in keep and "meta" not in holds}
    return sorted(lost)


def _warn_lost(name: str, path: Path, lost: list[str]) -> list[str]:
    if lost:
        warnings.warn(
            f"{path}: the {name} format cannot hold {', '.join(lost)}; those fields were "
            "not written (use the arborl format to keep everything)",
            LossyExportWarning,
            stacklevel=3,
        )
    return lost


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """Write `rows` (read one at a time) as JSON Lines, atomically; returns how many."""
    num = 0

    def write(p: Path) -> None:
        nonlocal num
        with open(p, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
                num += 1

    atomic_write(path, write)
    return num


def batched(items: Iterable, size: int) -> Iterable[list]:
    """Lists of `size` consecutive items (the last one shorter), read lazily."""
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def write_task_parquet(path: Path, rows: Iterable[dict], batch_rows: int = 4096) -> int:
    """Write task rows (`task_table`'s layout) as parquet, `batch_rows` at a time (one row
    group each), atomically; returns how many."""
    import pyarrow.parquet as pq

    from arborl.data.tasks import task_schema

    num = 0

    def write(p: Path) -> None:
        nonlocal num
        with pq.ParquetWriter(p, task_schema()) as w:
            for batch in batched(rows, batch_rows):
                w.write_table(task_table(batch))
                num += len(batch)

    atomic_write(path, write)
    return num


# --- sharegpt --------------------------------------------------------------------------
_TO_SHAREGPT = {"system": "system", "user": "human", "assistant": "gpt"}


def to_sharegpt_turns(msgs: list[dict]) -> list[dict]:
    out = []
    for m in msgs:
        turn = {"from": _TO_SHAREGPT[m["role"]], "value": m["content"]}
        if "loss" in m:
            turn["loss"] = m["loss"]
        out.append(turn)
    return out


def _parse_sharegpt(row: dict, source: SourceConfig) -> Trajectory:
    parts = messages_to_parts(row.get("conversations"), source.action_format, "conversations",
                              "from", "value", "loss")  # fmt: skip
    env_id = row.get("data_source") or source.domain or "unknown"
    t = build_trajectory(parts, "", str(env_id), _won(row, source), _row_split(row))
    t.task_id = str(row.get("id") or row.get("item_id") or derived_task_id(t))
    return t


def _write_sharegpt(path: Path, trajs: Sequence[Trajectory], action_format: str) -> list[str]:
    rows = ({"id": t.task_id, "conversations": to_sharegpt_turns(trajectory_to_messages(t))}
            for t in trajs)  # fmt: skip
    write_jsonl(path, rows)
    holds = {"task_id", "instruction", "steps"}
    return _warn_lost("sharegpt", path, lost_fields(trajs, holds, action_format))


# --- openai ----------------------------------------------------------------------------
def to_openai_messages(msgs: list[dict]) -> list[dict]:
    out = []
    for m in msgs:
        msg = {"role": m["role"], "content": m["content"]}
        if "loss" in m:
            msg["weight"] = int(bool(m["loss"]))
        out.append(msg)
    return out


def _parse_openai(row: dict, source: SourceConfig) -> Trajectory:
    parts = messages_to_parts(row.get("messages"), source.action_format, "messages", "role",
                              "content", "weight")  # fmt: skip
    meta_in = row.get("metadata") or {}
    if not isinstance(meta_in, dict):
        raise FieldError("metadata", f"expected an object, got {meta_in!r:.40}")
    env_id = meta_in.get("env_id") or source.domain or "unknown"
    merged = {**meta_in, **row}
    t = build_trajectory(parts, "", str(env_id), _won(merged, source), _row_split(merged))
    t.task_id = str(row.get("id") or meta_in.get("task_id") or derived_task_id(t))
    return t


def _write_openai(path: Path, trajs: Sequence[Trajectory], action_format: str) -> list[str]:
    rows = ({"messages": to_openai_messages(trajectory_to_messages(t))} for t in trajs)
    write_jsonl(path, rows)
    holds = {"instruction", "steps"}
    return _warn_lost("openai", path, lost_fields(trajs, holds, action_format))


# --- verl ------------------------------------------------------------------------------
def _as_dict(row: dict, key: str) -> dict:
    value = row.get(key) or {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise FieldError(key, f"a string that is not JSON: {e.msg}") from e
    if not isinstance(value, dict):
        raise FieldError(key, f"expected an object, got {value!r:.40}")
    return value


_EXTRA_KEYS = ("task_id", "seed", "won", "index", "conversations", "meta", "split", "env_split",
               "total_return")  # fmt: skip


def _verl_meta(extra: dict) -> dict:
    """Trajectory meta from `extra_info`: our own `meta` JSON, other keys as they are,
    `env_split` back to `meta['split']`, and a dataset split label as `source_split`
    (OpenManus-RL rows) or `curated_split` (rows `arborl curate` wrote)."""
    meta: dict[str, Any] = {}
    if extra.get("meta"):
        inner = extra["meta"]
        meta.update(json.loads(inner) if isinstance(inner, str) else inner)
    meta.update({k: v for k, v in extra.items() if k not in _EXTRA_KEYS and v not in ("", None)})
    if extra.get("env_split"):
        meta["split"] = extra["env_split"]
    if extra.get("split"):
        meta["curated_split" if "env_split" in extra else "source_split"] = extra["split"]
    return meta


def _parse_verl(row: dict, source: SourceConfig) -> Trajectory:
    if not isinstance(row.get("data_source"), str):
        raise FieldError("data_source", f"expected a string, got {row.get('data_source')!r:.40}")
    prompt = row.get("prompt")
    if isinstance(prompt, str) and prompt.lstrip().startswith("["):
        try:  # a JSON-text column holding the message list
            prompt = json.loads(prompt)
        except json.JSONDecodeError:
            pass
    if isinstance(prompt, str):  # a bare prompt string is one user message
        prompt = [{"role": "user", "content": prompt}]
    extra = _as_dict(row, "extra_info")
    reward_model = _as_dict(row, "reward_model")
    convs = extra.get("conversations")
    if convs:  # OpenManus-RL rows carry the whole episode here
        parts = messages_to_parts(convs, source.action_format, "extra_info.conversations",
                                  "from", "value", "loss")  # fmt: skip
    else:
        parts = messages_to_parts(prompt, source.action_format, "prompt", "role", "content", "loss")
        if parts[1]:
            raise FieldError("prompt", "a task prompt must end with a user message")
    meta = _verl_meta(extra)
    if row.get("ability"):
        meta["ability"] = row["ability"]
    if reward_model.get("ground_truth") not in (None, ""):
        meta["reward_model"] = reward_model
    t = build_trajectory(parts, "", row["data_source"], _won(extra, source), meta)
    seed = extra.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise FieldError("extra_info.seed", f"expected an int, got {seed!r:.40}")
    t.seed = seed
    tid = extra.get("task_id") or row.get("item_id") or extra.get("index")
    t.task_id = str(tid) if tid not in (None, "") else derived_task_id(t)
    return t


def verl_row(t: Trajectory, index: int, split: str = "", domain: str | None = None) -> dict:
    """One task-prompt row of `t` (its instruction and first observation)."""
    prompt = [m for m in trajectory_to_messages(t)[:2] if m["role"] in ("system", "user")]
    if prompt and prompt[-1]["role"] != "user":
        prompt = prompt[:1]
    prompt = [{"role": m["role"], "content": m["content"]} for m in prompt]
    other = {k: v for k, v in t.meta.items()
             if k not in ("split", "curated_split", "domain", "ability", "reward_model",
                          "turn_loss", "final_observation")}  # fmt: skip
    rm = t.meta.get("reward_model") or {"style": "rule", "ground_truth": ""}
    return {
        "data_source": t.env_id,
        "prompt": prompt,
        "ability": domain or t.meta.get("ability") or t.meta.get("domain") or t.env_id,
        "reward_model": {
            "style": str(rm.get("style", "rule")),
            "ground_truth": str(rm.get("ground_truth", "")),
        },  # fmt: skip
        "extra_info": {
            "index": index,
            "split": split,
            "task_id": t.task_id,
            "seed": t.seed,
            "env_split": str(t.meta.get("split") or ""),
            "won": bool(t.won),
            "total_return": t.total_return,
            "meta": json.dumps(other, default=repr),
        },  # fmt: skip
    }


def _write_verl(path: Path, trajs: Sequence[Trajectory], action_format: str) -> list[str]:
    write_task_parquet(path, (verl_row(t, i) for i, t in enumerate(trajs)))
    holds = {"task_id", "env_id", "seed", "won", "instruction", "meta"}
    lost = [k for k in lost_fields(trajs, holds, action_format) if k != "steps[].action"]
    if any(t.steps for t in trajs):
        lost.append("steps (the actions and later turns: a task row keeps the prompt)")
    return _warn_lost("verl", path, sorted(set(lost) - {"steps"}))


# --- arborl ----------------------------------------------------------------------------
def _parse_arborl(row: dict, source: SourceConfig) -> Trajectory:
    for key in ("steps", "meta"):
        if isinstance(row.get(key), str):  # the parquet layout keeps them as JSON text
            try:
                row = {**row, key: json.loads(row[key])}
            except json.JSONDecodeError as e:
                raise FieldError(key, f"a string that is not JSON: {e.msg}") from e
    _check_arborl_types(row)
    steps = []
    for i, s in enumerate(row.get("steps", [])):
        try:
            steps.append(Step(**s))
        except TypeError as e:
            raise FieldError(f"steps[{i}]", str(e)) from e
    try:
        t = Trajectory.from_dict({**row, "steps": steps})
    except (TypeError, ValueError) as e:
        raise FieldError("(row)", str(e)) from e
    t.won = bool(t.won) if source.won is None else source.won
    return t


def _write_arborl(path: Path, trajs: Sequence[Trajectory], action_format: str) -> list[str]:
    from arborl.data import write_trajectories

    write_trajectories(path, trajs)
    return []


def register_format(fmt: Format) -> None:
    FORMATS.register(fmt.name, fmt, replace=False)


register_format(
    Format("sharegpt", lambda r: "conversations" in r, _parse_sharegpt, _write_sharegpt)
)
register_format(Format("openai", lambda r: "messages" in r, _parse_openai, _write_openai))
register_format(
    Format("verl", lambda r: "data_source" in r and "prompt" in r, _parse_verl, _write_verl)
)
register_format(
    Format("arborl", lambda r: "task_id" in r and "env_id" in r, _parse_arborl, _write_arborl)
)


def write_format(
    name: str, path: str | Path, trajs: Sequence[Trajectory], action_format: str = "plain"
) -> list[str]:
    """Write `trajs` in format `name` (atomically); returns the fields it could not hold.
    A `Sequence` is read as it is (a lazy one streams: writers may read it twice)."""
    trajs = trajs if isinstance(trajs, Sequence) else list(trajs)
    return get_format(name).write(Path(path), trajs, action_format)


def parse_row(row: Any, source: SourceConfig) -> Trajectory:
    """One raw row -> Trajectory in the source's format (auto: detected from its keys)."""
    if isinstance(row, FieldError):
        raise row
    if not isinstance(row, dict):
        raise FieldError("(row)", f"expected a JSON object, got {type(row).__name__}")
    name = source.format if source.format != "auto" else detect_format(row)
    return get_format(name).parse(row, source)
