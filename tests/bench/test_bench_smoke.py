"""The `bench/` scripts run end to end at toy size and write the JSON keys the docs rely on.

Benchmarks are not tests (timings are never asserted); this only checks that the scripts
still work against the current library and TRL. Needs the `bench` extra (trl, datasets).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytest.importorskip(
    "trl", reason="the bench scripts compare against TRL: pip install -e '.[bench]'"
)
pytest.importorskip("datasets")


def run_script(name: str, out: Path, *extra: str) -> dict:
    cmd = [sys.executable, str(BENCH / name), "--quick", "--repeats", "1", "--out", str(out)]
    proc = subprocess.run(
        [*cmd, *extra], capture_output=True, text=True, timeout=300, env=None, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| method |" in proc.stdout or "| model |" in proc.stdout  # the printed table
    return json.loads(out.read_text())


@pytest.mark.slow
def test_score_actions_bench_writes_its_json(tmp_path):
    doc = run_script("score_actions.py", tmp_path / "score_actions.json")
    assert doc["benchmark"] == "score_actions" and doc["quick"] is True
    assert doc["machine"]["cpu_model"] is not None and len(doc["machine"]["loadavg"]) == 3
    for case in doc["cases"]:
        assert case["candidates"] == 4 and case["generate_cpu_s"] > 0 and case["score_cpu_s"] > 0
        assert case["ratio_cpu"] == pytest.approx(case["score_cpu_s"] / case["generate_cpu_s"])


@pytest.mark.slow
def test_rollout_bench_writes_its_json(tmp_path):
    doc = run_script("rollout.py", tmp_path / "rollout.json")
    assert doc["benchmark"] == "rollout" and doc["quick"] is True
    assert len(doc["machine"]["loadavg"]) == 3 and doc["machine"]["torch_num_threads"] == 1
    assert [c["env_id"] for c in doc["cases"]] == ["arborl/Maze-v0", "arborl/Countdown-v0"]
    for case in doc["cases"]:
        summary = case["summary"]
        for method in ("arborl", "naive", "trl"):
            s = summary[method]
            for key in ("tokens_per_s", "episodes_per_s", "env_steps_per_s", "tokens_per_episode"):
                assert s[key] > 0, (case["env_id"], method, key)
            assert len(case["runs"][method]) == 1
        for base in ("naive", "trl"):
            assert summary[f"arborl_over_{base}"]["tokens_per_s"] > 0


@pytest.mark.slow
def test_train_step_bench_writes_its_json(tmp_path):
    doc = run_script("train_step.py", tmp_path / "train_step.json", "--models", "tiny-0.1m")
    assert doc["benchmark"] == "train_step"
    assert doc["setup"]["prompts"] * doc["setup"]["group_size"] == 32
    assert doc["setup"]["trl_gradient_checkpointing"] is False  # like for like by default
    assert [(m["model"], m["dtype"]) for m in doc["models"]] == [
        ("tiny-0.1m", "float32"), ("tiny-0.1m", "bfloat16")
    ]  # fmt: skip
    for model in doc["models"]:
        for key in ("step_s", "step_cpu_s", "generate_s", "update_s"):
            assert model["arborl"][key] > 0
        assert model["trl"]["step_s"] > 0 and model["trl"]["step_cpu_s"] > 0
        assert model["ratio_arborl_over_trl"] > 0 and model["ratio_cpu"] > 0
        assert model["trl"]["gradient_checkpointing"] is False
        # Both sides generate exactly 32 new tokens per sample.
        assert model["arborl"]["mean_new_tokens"] == 32
        assert model["trl"]["mean_new_tokens"] == 32


def _run_plain(name: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH / name), *args],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_rl_step_bench_writes_its_breakdown(tmp_path):
    out = tmp_path / "rl_step.json"
    overrides = ["rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=2"]
    stdout = _run_plain(
        "rl_step.py", "--threads", "1", "--steps", "1", "--warmup", "0", "--sft-steps", "0",
        "--out", str(out), *overrides,
    )  # fmt: skip
    assert "| part |" in stdout
    doc = json.loads(out.read_text())
    med = doc["medians"]["1"]
    assert med["total"] > 0 and med["cpu/total"] > 0 and med["rollout/generate"] > 0
    assert med["update"] >= 0 and doc["machine"]["cpu_model"]
    assert isinstance(doc["machine"]["cpu_amx"], bool)


@pytest.mark.slow
def test_sft_step_bench_writes_both_sides(tmp_path):
    out = tmp_path / "sft_step.json"
    stdout = _run_plain("sft_step.py", "--steps", "1", "--warmup", "0", "--out", str(out))
    assert "| side |" in stdout
    doc = json.loads(out.read_text())
    assert doc["median_s"]["arborl"] > 0 and doc["median_s"]["minimal"] > 0 and doc["ratio"] > 0


@pytest.mark.slow
def test_async_rollout_bench_runs_both_schedules_to_the_same_episodes(tmp_path):
    out = tmp_path / "async.json"
    stdout = _run_plain("async_rollout.py", "--quick", "--presets", "tiny-0.1m", "--out", str(out))
    assert "| policy prompts |" in stdout
    doc = json.loads(out.read_text())
    assert doc["env_id"] == "bench/SlowMaze-v0" and doc["num_envs"] == 16
    assert doc["identical_trajectories"] == {"tiny-0.1m demo": [True]}
    for schedule in ("lockstep", "async"):
        (run,) = doc["runs"][f"tiny-0.1m demo {schedule}"]
        assert run["env_steps"] > 0 and run["steps_per_s"] > 0 and run["generate_calls"] > 0
    assert doc["speedup"]["tiny-0.1m demo"] > 0


@pytest.mark.slow
def test_bpe_drift_bench_counts_re_encoded_turns(tmp_path):
    out = tmp_path / "bpe_drift.json"
    stdout = _run_plain("bpe_drift.py", "--quick", "--out", str(out))
    assert "| env |" in stdout
    (case,) = json.loads(out.read_text())["cases"]
    assert case["env_id"] == "arborl/Maze-v0" and case["max_new_tokens"] == 6
    assert 0 < case["turns"] <= 2 * 2 * 3  # 2 tasks x 2 episodes x up to 3 turns
    assert 0 <= case["re_encoded_differs"] <= case["turns"]
    assert case["fraction"] == case["re_encoded_differs"] / case["turns"]
