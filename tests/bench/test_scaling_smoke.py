"""`bench/scaling.py`: the growth fit is right, every point of the full run is a valid
config, and a toy run writes the table, the JSON and the plot (timings are not asserted)."""

import json
import math
import subprocess
import sys

import pytest

from arborl.train.config import load_train_config

from ._scripts import BENCH, load_script


def test_loglog_slope_reads_linear_quadratic_and_flat_growth():
    scaling = load_script("scaling")
    xs = [64, 128, 256, 512]
    assert scaling.loglog_slope(xs, [3 * x for x in xs]) == pytest.approx(1.0)
    assert scaling.loglog_slope(xs, [x * x for x in xs]) == pytest.approx(2.0)
    assert scaling.loglog_slope(xs, [5.0] * 4) == pytest.approx(0.0)
    assert math.isnan(scaling.loglog_slope([64], [1.0]))


def test_every_full_run_point_is_a_valid_config(tmp_path):
    scaling = load_script("scaling")
    plan = scaling.axes(quick=False)
    assert [p["num_tasks"] * p["group_size"] for p in plan["episodes"]] == [64, 128, 256, 512, 1024]
    assert [p["max_turns"] for p in plan["turns"]] == [4, 8, 16, 32]
    assert [p["model"] for p in plan["model"]] == ["tiny-1m", "tiny-20m", "bench-100m"]
    scaling.register_big_preset()
    for points in plan.values():
        for p in points:
            cfg = load_train_config(scaling.point_overrides(p, str(tmp_path)))
            assert cfg.rollout.num_tasks == p["num_tasks"] and not cfg.sft.enabled
            assert cfg.algo.drop_zero_adv is False


def test_bench_100m_preset_has_about_100m_parameters():
    scaling = load_script("scaling")
    b = scaling.BIG_PRESET
    h, f, n = b["hidden"], b["ffn"], b["layers"]
    per_layer = 4 * h * h + 3 * h * f  # q, k, v, o (no GQA) + gate, up, down
    assert 90e6 < n * per_layer < 110e6


@pytest.mark.slow
def test_quick_run_writes_table_json_and_plot(tmp_path):
    out = tmp_path / "scaling.json"
    cmd = [sys.executable, str(BENCH / "scaling.py"), "--quick", "--axes", "episodes"]
    proc = subprocess.run(
        [*cmd, "--out", str(out)], capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| axis | point |" in proc.stdout and "| axis | slope step |" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "scaling" and doc["quick"] is True
    assert doc["machine"]["cpu_model"] and len(doc["machine"]["loadavg"]) == 3
    rows = doc["results"]["episodes"]
    assert [r["episodes"] for r in rows] == [4, 8]
    for r in rows:
        assert "error" not in r, r
        assert r["step_s"] > 0 and r["update_s"] > 0 and r["peak_rss_mb"] > r["rss_before_mb"]
        # the trainer's breakdown adds up to at most the measured step
        assert r["rollout_s"] + r["update_s"] <= r["step_s"] + 1e-6
    assert math.isfinite(doc["slopes"]["episodes"]["step_s"])
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_gpu_estimate_uses_the_measured_fsdp_bytes_and_shards_state_over_gpus():
    est_mod = load_script("gpu_estimate")
    bpp = est_mod.fsdp_bytes_per_param(BENCH / "results" / "distributed.json")
    # fp32 params + fp32 grads + AdamW's two fp32 moments, as bench/distributed.py measured
    assert bpp == pytest.approx({"params": 4.0, "grads": 4.0, "optim": 8.0})
    est = est_mod.estimate([1, 2, 8], 16384, 32, bpp, None)
    w = est_mod.WORKLOAD
    tokens = w["episodes"] * w["turns"] * (w["prompt_tokens"] + w["response_tokens"])
    assert est["tokens_per_step"] == tokens
    one, two, eight = est["rows"]
    assert one["sharded_state_gib"] == pytest.approx(1.54e9 * 16 / 2**30)
    assert two["sharded_state_gib"] == pytest.approx(one["sharded_state_gib"] / 2)
    assert eight["update_s"] == pytest.approx(one["update_s"] / 8)
    assert one["activations_gib"] == eight["activations_gib"] > 0  # per micro-batch, not sharded
