"""The charts' series and numbers, without a browser."""

from arborl.report.charts import build_charts, env_steps_per_s, success_chart, thin
from arborl.report.load import load_run


def _by_id(charts):
    return {c["id"]: c for c in charts}


def test_success_chart_has_intervals_and_baselines(runs) -> None:
    a, b = (load_run(r) for r in runs)
    ch = success_chart([a, b], max_points=100)
    # one held-out series per run + random and oracle once (same env)
    assert [t["name"] for t in ch["traces"]] == [
        "a: held-out",
        "b: held-out",
        "random (arborl/Maze-v0): 0.050",
        "oracle (arborl/Maze-v0): 1.000",
    ]
    held = ch["traces"][0]
    assert held["x"] == [0, 4] and held["y"] == [0.25, 0.5]
    # error bars: hi - v and v - lo, from the conftest numbers
    assert held["error_y"]["array"] == [0.7 - 0.25, 0.85 - 0.5]
    assert held["error_y"]["arrayminus"] == [0.25 - 0.05, 0.5 - 0.15]
    assert ch["traces"][2]["x"] == [0, 6] and ch["traces"][2]["y"] == [0.05, 0.05]


def test_sections_group_metrics_by_prefix(runs) -> None:
    charts = build_charts([load_run(runs[0])])
    ids = _by_id(charts)
    rewards = ids["m-reward-components-(per-episode)"]
    assert rewards["section"] == "Rewards"
    assert [t["name"] for t in rewards["traces"]] == ["reward/env", "reward/invalid_action"]
    # metrics nobody listed (adv/std, actor/entropy) still get a Diagnostics chart
    assert ids["m-adv-std"]["section"] == ids["m-actor-entropy"]["section"] == "Diagnostics"
    split = ids["m-step-time-split-(s)"]
    assert split["section"] == "Throughput" and all(t["stackgroup"] == "a" for t in split["traces"])
    assert ids["m-training-success"]["traces"][0]["y"] == [0.1, 0.2, 0.3, 0.4]
    assert [c["section"] for c in charts][:2] == ["Success", "Success"]


def test_env_steps_per_second(runs) -> None:
    xs, ys = env_steps_per_s(load_run(runs[0]))
    assert xs == [1, 2, 3, 4] and ys == [5.0, 5.0, 5.0, 5.0]  # 10 new env steps / 2 s


def test_long_curves_are_thinned() -> None:
    xs, ys = thin(list(range(1000)), [float(i) for i in range(1000)], 5)
    assert xs == [0, 250, 500, 749, 999] and ys[-1] == 999.0  # round(i * 999 / 4)


def test_mismatch_metrics_have_their_own_section() -> None:
    """A rollout correction's `mismatch/*` and the async lag `async/staleness` are the
    report's "Off-policy and mismatch" panel, not lost among the diagnostics."""
    from arborl.report.charts import section_of

    for key in ("mismatch/kl", "mismatch/log_ratio_abs_max", "async/staleness"):
        assert section_of(key) == "Off-policy and mismatch"
    assert section_of("actor/approx_kl") == "Diagnostics"
