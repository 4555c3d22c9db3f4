"""`bench/learning.py` (an `arborl compare` grid per env) runs end to end at toy size and
writes the JSON keys the docs rely on.

A benchmark, not a test of learning: success numbers are never asserted, only that every
(env, algo, seed) run finished from its SFT start within one rollout batch of the budget.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
def test_learning_bench_writes_its_json(tmp_path):
    out = tmp_path / "learning.json"
    cmd = [
        sys.executable, str(BENCH / "learning.py"), "--quick", "--out", str(out),
        "--work-dir", str(tmp_path / "work"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "gain over the start" in proc.stdout  # the printed tables
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "learning" and doc["quick"] is True
    assert out.with_suffix(".png").stat().st_size > 0
    setup = doc["setup"]
    assert setup["envs"] == ["maze", "sokoban"] and setup["algos"] == ["ppo", "grpo", "gigpo"]
    assert len(doc["sft"]) == 2 and len(doc["runs"]) == 6
    for sft in doc["sft"]:
        assert 0.0 <= sft["success_lo"] <= sft["success"] <= sft["success_hi"] <= 1.0
    batch = 2 * 2 * 4  # rollout.num_tasks x group_size x max_turns in --quick
    for run in doc["runs"]:
        sft = next(s for s in doc["sft"] if (s["env"], s["seed"]) == (run["env"], run["seed"]))
        assert run["before"]["success"] == sft["success"]  # same policy, same held-out tasks
        after = run["after"]
        assert 0.0 <= after["success_lo"] <= after["success"] <= after["success_hi"] <= 1.0
        budget = setup["env_steps_budget"][run["env"]]
        assert budget <= run["env_steps"] < budget + batch
        assert run["steps"] >= 1 and run["wall_s"] > 0 and not run["reused"]
        assert run["start"].startswith("<work-dir>/")  # no machine folder in the results
    assert [(s["env"], s["arm"]) for s in doc["summary"]] == [
        (env, algo) for env in ("maze", "sokoban") for algo in ("ppo", "grpo", "gigpo")
    ]
    for s in doc["summary"]:
        assert s["gain"] == pytest.approx(s["success"] - s["start_success"])
    assert [(d["a"], d["b"]) for d in doc["paired"]][:3] == [
        ("gigpo", "grpo"), ("grpo", "ppo"), ("gigpo", "ppo")
    ]  # fmt: skip
    # A second call with the same settings collects every finished run instead of retraining.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads(out.read_text())
    assert all(r["reused"] for r in again["runs"]) and all(s["reused"] for s in again["sft"])
    assert [r["after"] for r in again["runs"]] == [r["after"] for r in doc["runs"]]
