"""`bench/real_env_step.py` runs end to end at toy size on the BabyAI package and writes
the split the docs quote (timings are never asserted: benchmarks are not tests)."""

import json
import subprocess
import sys

import pytest

from arborl.envs.poolset import default_num_workers
from tests.bench._scripts import BENCH
from tests.envs.packages._real import set_up

pytestmark = pytest.mark.slow  # the package's worker processes and a few SFT steps


def test_real_env_step_bench_prints_the_split_and_writes_json(tmp_path, monkeypatch):
    set_up("babyai", monkeypatch)
    out = tmp_path / "real_env_step.json"
    cmd = [sys.executable, str(BENCH / "real_env_step.py"), "--envs", "babyai", "--threads",
           "1", "--model", "envbpe-tiny-0.1m", "--num-tasks", "2", "--group-size", "2",
           "--steps", "1", "--eval-episodes", "4", "--sft-steps", "3", "--sft-time-steps", "2",
           "--num-demos", "2", "--out", str(out), "rollout.max_turns=4"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| what | mode | wall s |" in proc.stdout and "load" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["machine"]["lscpu"].get("Model name") and len(doc["machine"]["loadavg_before"]) == 3
    whats = [row[0] for row in doc["table"]]
    assert sum(w.startswith("GRPO step 2x2 BabyAI") for w in whats) == 2  # generate, score
    assert sum(w == "eval 4 BabyAI" for w in whats) == 2
    assert any(w.startswith("SFT step (batch 64)") for w in whats)
    babyai = doc["results"]["babyai"]
    # one per core, at most one per env of the largest pool (4), started once for the run
    assert babyai["process_starts"] == min(4, default_num_workers())
    for mode in ("generate", "score"):
        (step,) = babyai[f"steps/{mode}"]
        parts = ("env", "policy", "update", "bookkeeping", "process start")
        assert step["total"] == pytest.approx(sum(step[p] for p in parts), rel=1e-6)
