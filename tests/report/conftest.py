"""Synthetic run dirs for the report tests: the files `arborl train` writes, made by hand so
that every number a test checks is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml


def episode(task: str, won: bool, actions: list[str], invalid_at: int = -1) -> dict:
    steps = [
        {
            "observation": f"obs {task} {i}",
            "action": a,
            "reward": 1.0 if (won and i == len(actions) - 1) else 0.0,
            "terminated": won and i == len(actions) - 1,
            "truncated": False,
            "info": {"won": won and i == len(actions) - 1, "valid_action": i != invalid_at},
            "response": f"<action>{a}</action>",
        }
        for i, a in enumerate(actions)
    ]
    return {"task_id": task, "env_id": "arborl/Maze-v0", "seed": 1, "steps": steps, "won": won}


def make_run(
    root: Path,
    name: str,
    num_steps: int = 4,
    lr: float = 1e-3,
    finished: bool = True,
    baselines: bool = True,
) -> Path:
    """runs/<name>: eval at 0 and num_steps (success 0.25 -> 0.5 on tasks t0..t3), RL
    steps 1..num_steps with train/success = step/10, reward/env, reward/invalid_action,
    actor/entropy, adv/std, time/* (rollout 2 s, update 1 s) and 10 env steps a step."""
    run = root / name
    run.mkdir(parents=True)
    cfg = {"env": {"id": "arborl/Maze-v0"}, "algo": {"name": "grpo", "lr": lr}}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    recs = [{"step": 0, "eval/success": 0.25, "eval/success_lo": 0.05, "eval/success_hi": 0.7}]
    for s in range(1, num_steps + 1):
        recs.append(
            {
                "step": s,
                "time_s": float(s),
                "train/success": s / 10,
                "train/env_steps": 10.0 * s,
                "reward/env": 0.1 * s,
                "reward/invalid_action": -0.01,
                "actor/entropy": 1.0 / s,
                "adv/std": 0.5,
                "time/rollout_s": 2.0,
                "time/update_s": 1.0,
                "phase": "rl",
            }
        )
    if finished:
        recs.append(
            {
                "step": num_steps,
                "eval/final_success": 0.5,
                "eval/final_success_lo": 0.15,
                "eval/final_success_hi": 0.85,
            }
        )
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    ev = run / "eval_episodes"
    ev.mkdir()
    before = [episode(f"t{i}", i == 0, ["u", "d", "l"], invalid_at=1) for i in range(4)]
    after = [episode(f"t{i}", i < 2, ["r", "r"]) for i in range(4)]
    for step, eps in ((0, before), (num_steps, after) if finished else (None, [])):
        if step is not None:
            (ev / f"step-{step:05d}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    tr = run / "trajectories"
    tr.mkdir()
    (tr / "step-00000.jsonl").write_text(json.dumps(episode("t9", True, ["u"])) + "\n")
    if baselines:
        rows = {"random": {"success": 0.05}, "oracle": {"success": 1.0}}
        (run / "baselines.json").write_text(json.dumps(rows))
    if finished:
        (run / "summary.json").write_text(json.dumps({"steps": num_steps, "wall_s": 12.5}))
    return run


@pytest.fixture
def runs(tmp_path) -> tuple[Path, Path]:
    """Two finished runs that differ in algo.lr (4 and 6 RL steps)."""
    return make_run(tmp_path, "a", 4, 1e-3), make_run(tmp_path, "b", 6, 3e-4)


@pytest.fixture
def run_factory():
    """`make_run(root, name, ...)` (see above)."""
    return make_run


HOSTILE_TEXT = {
    # `<!--` then `<script` puts the tokenizer in "script data double escaped": the data
    # block's own </script> would no longer close it. The two halves may sit in different
    # strings, as they do here (an observation and a later instruction).
    "observation": "<!-- unclosed comment in a page the env scraped",
    "instruction": "<script type=x> & <img src=x onerror=alert(1)> & ]]> &amp;",
    "action": "</script><script>alert('action')</script>",
    "response": "line\u2028separator\u2029paragraph <!--<script </SCRIPT >",
}
"""Episode text that broke (or could break) the report's inlined data block."""


def make_hostile_run(root: Path, name: str = "hostile") -> Path:
    """`make_run` with `HOSTILE_TEXT` in its first held-out episode, a NaN step reward, an
    Infinity return, a -Infinity return, and NaN / Infinity metric values (metrics.jsonl
    and the trajectories hold them as the bare tokens Python's json writes)."""
    run = make_run(root, name, 2)
    ev = run / "eval_episodes" / "step-00000.jsonl"
    eps = [json.loads(x) for x in ev.read_text().splitlines()]
    eps[0]["instruction"] = HOSTILE_TEXT["instruction"]
    eps[0]["steps"][0].update(
        observation=HOSTILE_TEXT["observation"],
        action=HOSTILE_TEXT["action"],
        response=HOSTILE_TEXT["response"],
        reward=float("nan"),
    )
    eps[0]["total_return"] = float("inf")
    eps[1]["total_return"] = float("-inf")
    ev.write_text("".join(json.dumps(e) + "\n" for e in eps))
    metrics = run / "metrics.jsonl"
    recs = [json.loads(x) for x in metrics.read_text().splitlines()]
    recs[1]["reward/env"], recs[2]["adv/std"] = float("nan"), float("inf")
    metrics.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert "NaN" in ev.read_text() and "Infinity" in metrics.read_text()
    return run
