"""`bench/gateway_learning.py` (SFT start recorded through the gateway, then an Agents SDK
agent trained with GRPO through it) runs end to end at toy size and writes its JSON.

A benchmark, not a test of learning: success is never asserted, only that the SFT start was
made, the RL run finished its steps from it, and before and after are paired evaluations."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow  # an SFT start, two RL steps and two evaluations of the Agents SDK agent
def test_gateway_learning_bench_writes_its_json(tmp_path):
    out = tmp_path / "gateway_learning.json"
    cmd = [sys.executable, str(BENCH / "gateway_learning.py"), "--quick", "--out", str(out),
           "--work-dir", str(tmp_path / "work")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "gain over the start" in proc.stdout and "[sft-start]" in proc.stdout
    assert (tmp_path / "work" / "sft-start" / "policy" / "config.json").exists()
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "gateway_learning" and doc["quick"] is True
    (run,) = doc["runs"]
    assert run["finished"] and run["steps"] == 2
    assert run["before"]["episodes"] == run["after"]["episodes"] == 4
    assert run["gain"] == pytest.approx(run["after"]["success"] - run["before"]["success"])
    assert run["gain_lo"] <= run["gain"] <= run["gain_hi"]
    assert doc["summary"][0]["arm"] == "raft"
