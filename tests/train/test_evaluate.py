"""`paired_gain`: the before/after change on the same tasks with a paired interval;
`evaluate_policy`: one call that reads the run's config, and `record_evaluation`: one way
to handle its result."""

import math
from dataclasses import FrozenInstanceError, fields, replace

import pytest

from arborl.data import Trajectory, read_trajectories
from arborl.generation import HFBackend
from arborl.models import load_policy
from arborl.rollout import RolloutConfig, collect_episodes, draw_seeds, make_policy
from arborl.rollout.metrics import wilson_interval
from arborl.train.config import TrainConfig, load_train_config
from arborl.train.evaluate import (
    EvalResult,
    evaluate_policy,
    format_gain,
    paired_gain,
    record_evaluation,
    summarize_eval,
)

MAZE = "arborl/Maze-v0"


@pytest.fixture(scope="module")
def tiny():
    """(backend, tokenizer) of the untrained tiny preset: fast, and it wins some mazes."""
    model, tok = load_policy("tiny-0.1m", seed=0)
    return HFBackend(model, tok), tok


def maze_cfg(**eval_fields) -> TrainConfig:
    """The demo run's config (Maze) at toy size: 4 turns of 4 new tokens; `eval_fields`
    set on `cfg.eval`."""
    cfg = load_train_config([])
    rollout = replace(cfg.rollout, max_turns=4, max_new_tokens=4)
    return replace(cfg, rollout=rollout, eval=replace(cfg.eval, **eval_fields))


def test_paired_gain_counts_and_interval():
    before = {s: float(s < 40) for s in range(100)}  # 40 won
    after = {s: float(s < 40 or 40 <= s < 60) for s in range(100)}  # 20 more won, none lost
    after[0] = 0.0  # one lost that was won
    g = paired_gain(before, after)
    assert g["tasks"] == 100 and g["improved"] == 20 and g["worsened"] == 1
    assert g["gain"] == pytest.approx(0.19)
    # the per-task differences are 20 x +1, 1 x -1, 79 x 0
    sd = math.sqrt((20 * (1 - 0.19) ** 2 + (-1 - 0.19) ** 2 + 79 * 0.19**2) / 99)
    assert g["gain_lo"] == pytest.approx(0.19 - 1.96 * sd / 10)
    assert g["gain_hi"] == pytest.approx(0.19 + 1.96 * sd / 10)
    assert g["gain_lo"] > 0.1  # narrower than two separate Wilson intervals would allow
    assert "+0.190" in format_gain("gain", g) and "20 tasks won that were lost" in format_gain(
        "gain", g
    )


def test_paired_gain_uses_only_shared_tasks_and_needs_two():
    assert paired_gain({1: 1.0}, {1: 0.0}) is None
    g = paired_gain({1: 0.0, 2: 0.0, 3: 1.0}, {2: 1.0, 3: 1.0, 4: 0.0})
    assert g["tasks"] == 2 and g["gain"] == 0.5 and g["improved"] == 1


def test_no_change_has_a_zero_width_interval():
    same = {s: float(s % 3 == 0) for s in range(30)}
    g = paired_gain(same, dict(same))
    assert g["gain"] == g["gain_lo"] == g["gain_hi"] == 0.0


def test_summarize_eval_merges_the_outcomes_of_every_share():
    shares = [
        {"episodes": 2.0, "wins": 1.0, "outcomes": {5: 1.0, 6: 0.0}},
        {"episodes": 1.0, "wins": 1.0, "outcomes": {7: 1.0}},
    ]
    out = summarize_eval(shares)
    assert out.outcomes == {5: 1.0, 6: 0.0, 7: 1.0} and out.success == pytest.approx(2 / 3)


def test_chunked_evaluation_bounds_its_pools_and_keeps_the_tasks(tiny, monkeypatch):
    """eval.chunk_episodes: no pool holds more envs than a chunk (chunks of one size share
    a pool); the tasks are the same, and a greedy evaluation (no sampling) gives the same
    outcomes and stats as one batch."""
    import arborl.envs.poolset as poolset

    sizes = []
    real = poolset.make_pool
    monkeypatch.setattr(
        poolset, "make_pool", lambda e, n, *a, **k: sizes.append(n) or real(e, n, *a, **k)
    )

    def run(chunk, temperature):
        sizes.clear()
        cfg = maze_cfg(
            num_episodes=7, temperature=temperature, chunk_episodes=chunk, seed=4, save_episodes=0
        )
        return evaluate_policy(*tiny, cfg), list(sizes)

    whole, whole_sizes = run(None, 0.0)
    chunked, chunked_sizes = run(3, 0.0)
    assert whole_sizes == [7] and chunked_sizes == [3, 1]
    assert chunked.outcomes == whole.outcomes and len(whole.outcomes) == 7
    for key in ("success", "episodes", "mean_return", "mean_turns", "invalid_action_rate"):
        assert chunked.metrics[key] == pytest.approx(whole.metrics[key]), key
    sampled, _ = run(3, 1.0)
    again, _ = run(3, 1.0)
    assert sampled.outcomes.keys() == whole.outcomes.keys()
    assert sampled == again  # chunks continue one seeded stream: repeatable


def test_evaluate_policy_reads_every_setting_from_the_run_config(tiny, pool_mode_spy):
    """The envs of env.pool_mode with the run's pool options, env kwargs and eval split,
    and eval.save_episodes trajectories kept as `sample` (a hand-written copy of the old
    11-argument call in the vLLM engine dropped that one)."""
    cfg = maze_cfg(num_episodes=5, save_episodes=3, seed=4)
    env = replace(cfg.env, pool_mode="subprocess", eval_split="val", timeout_s=7.0)
    out = evaluate_policy(*tiny, replace(cfg, env=env))
    ((mode, kw),) = pool_mode_spy
    assert mode == "subprocess" and kw["split"] == "val" and kw["timeout_s"] == 7.0
    assert kw["short_actions"] is True  # env.kwargs of the demo config
    assert out.episodes == 5 and sorted(out.outcomes) == sorted(draw_seeds(5, 4))
    assert len(out.sample) == 3 and all(isinstance(t, Trajectory) for t in out.sample)
    assert 0.0 <= out.success_lo <= out.success <= out.success_hi <= 1.0
    assert evaluate_policy(*tiny, maze_cfg(num_episodes=2, save_episodes=0)).sample == ()


def test_evaluate_policy_takes_a_count_or_the_task_seeds(tiny):
    cfg = maze_cfg(num_episodes=50, save_episodes=0, seed=4)
    assert sorted(evaluate_policy(*tiny, cfg, num_episodes=2).outcomes) == sorted(draw_seeds(2, 4))
    out = evaluate_policy(*tiny, cfg, seeds=[3, 9])
    assert sorted(out.outcomes) == [3, 9] and out.episodes == 2
    with pytest.raises(ValueError, match="num_episodes=3 but 2 seeds"):
        evaluate_policy(*tiny, cfg, num_episodes=3, seeds=[3, 9])


def test_record_evaluation_writes_the_sample_and_takes_out_the_outcomes(tiny, tmp_path):
    result = evaluate_policy(*tiny, maze_cfg(num_episodes=4, save_episodes=2))
    metrics, outcomes = record_evaluation(tmp_path, 7, result)
    assert outcomes == result.outcomes and len(outcomes) == 4
    assert metrics == result.metrics and result.first_error == ""  # no episode errored
    assert all(isinstance(v, float) for v in metrics.values())  # every one a logged metric
    written = read_trajectories(tmp_path / "eval_episodes" / "step-00007.jsonl")
    assert [t.task_id for t in written] == [t.task_id for t in result.sample]
    nothing = EvalResult(success=1.0, success_lo=0.2, success_hi=1.0, episodes=1)
    metrics, outcomes = record_evaluation(tmp_path, 8, nothing)
    assert (metrics["success"], metrics["episodes"], outcomes) == (1.0, 1.0, {})
    assert not (tmp_path / "eval_episodes" / "step-00008.jsonl").exists()


def test_an_evaluation_is_one_typed_record_with_one_success_name():
    """`EvalResult`: frozen, its main number `success` (never `success_rate`), and its
    logged metrics the success, its bounds, episodes, env errors and the means, as floats."""
    shares = [
        {
            "episodes": 3.0,
            "wins": 2.0,
            "env_errors": 1.0,
            "mean_turns": 4.0,
            "first_error": "",
            "outcomes": {1: 1.0, 2: 1.0, 3: 0.0},
            "sample": ["a", "b"],
        },
        {
            "episodes": 1.0,
            "wins": 0.0,
            "mean_turns": 2.0,
            "first_error": "env died",
            "outcomes": {4: 0.0},
            "sample": ["c"],
        },
    ]
    ev = summarize_eval(shares, keep_episodes=2)
    assert [f.name for f in fields(EvalResult)] == [
        "success",
        "success_lo",
        "success_hi",
        "episodes",
        "env_errors",
        "means",
        "outcomes",
        "sample",
        "first_error",
    ]
    assert (ev.success, ev.episodes, ev.env_errors) == (0.5, 4, 1)
    assert (ev.success_lo, ev.success_hi) == wilson_interval(2, 4)
    assert ev.means == {"mean_turns": pytest.approx(3.5)}  # weighted by each share's episodes
    assert ev.sample == ("a", "b") and ev.first_error == "env died"
    assert list(ev.metrics) == [
        "success",
        "success_lo",
        "success_hi",
        "episodes",
        "env_errors",
        "mean_turns",
    ]
    assert all(type(v) is float for v in ev.metrics.values())
    with pytest.raises(FrozenInstanceError):
        ev.success = 1.0


def test_one_name_for_the_success_bounds():
    """Rollout stats and an evaluation both call the Wilson bounds success_lo/success_hi
    (`arborl eval` rows and the report baselines copy them: tests/e2e, tests/report)."""
    cfg = RolloutConfig(max_turns=4)
    stats = collect_episodes(make_policy("random", cfg, seed=0), MAZE, 6, cfg, seed=0).stats
    wins = round(stats["success"] * 6)
    assert (stats["success_lo"], stats["success_hi"]) == wilson_interval(wins, 6)
    assert not any("ci" in k for k in stats)
    ev = summarize_eval([{"episodes": 6.0, "wins": 2.0}])
    assert (ev.success_lo, ev.success_hi) == wilson_interval(2, 6)


def test_every_engine_evaluates_through_the_one_call(tiny, monkeypatch):
    """The vLLM engine lost `eval.save_episodes` when it had its own copy of the call; now
    it is a `LocalEngine` with another generation backend, so its evaluation is the local
    one by construction. Checked without vLLM: its backend is swapped for the HF one."""
    from arborl.train.engine import LocalEngine
    from arborl.train.vllm_engine import VLLMEngine

    for method in ("rollout", "evaluate", "update", "save", "load"):
        assert getattr(VLLMEngine, method) is getattr(LocalEngine, method), method
    cfg = maze_cfg(save_episodes=3, num_episodes=5)
    cfg = replace(cfg, model=replace(cfg.model, name_or_path="tiny-0.1m"))
    engine = VLLMEngine(cfg)
    monkeypatch.setattr(engine, "generation_backend", lambda: tiny[0])
    try:
        ev = engine.evaluate()
    finally:
        engine.close()
    assert ev.episodes == 5 and len(ev.sample) == 3
    assert engine.sync_weights() == {"weights/version": 1.0, "weights/reload_s": 0.0}
