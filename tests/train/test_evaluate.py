"""`paired_gain`: the before/after change on the same tasks with a paired interval."""

import math

import pytest

from arborl.train.evaluate import format_gain, paired_gain, summarize_eval


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
    assert out["outcomes"] == {5: 1.0, 6: 0.0, 7: 1.0} and out["success"] == pytest.approx(2 / 3)


def test_chunked_evaluation_bounds_its_pools_and_keeps_the_tasks(monkeypatch):
    """eval.chunk_episodes: no pool holds more envs than a chunk; the tasks are the same,
    and a greedy evaluation (no sampling) gives the same outcomes and stats as one batch."""
    import arborl.rollout.engine as engine
    from arborl.agent import AgentConfig
    from arborl.generation import HFBackend
    from arborl.models import load_policy
    from arborl.rollout import RolloutConfig
    from arborl.train.config import EvalConfig
    from arborl.train.evaluate import evaluate_policy

    sizes = []
    real = engine.make_pool
    monkeypatch.setattr(
        engine, "make_pool", lambda e, n, *a, **k: sizes.append(n) or real(e, n, *a, **k)
    )
    model, tok = load_policy("tiny-0.1m", seed=0)
    backend = HFBackend(model, tok)
    rollout = RolloutConfig(max_turns=4, max_new_tokens=4)
    args = (backend, tok, "arborl/Maze-v0", {"short_actions": True}, AgentConfig(), rollout)

    def run(chunk, temperature):
        sizes.clear()
        cfg = EvalConfig(num_episodes=7, temperature=temperature, chunk_episodes=chunk, seed=4)
        return evaluate_policy(*args, cfg), list(sizes)

    whole, whole_sizes = run(None, 0.0)
    chunked, chunked_sizes = run(3, 0.0)
    assert whole_sizes == [7] and chunked_sizes == [3, 3, 1]
    assert chunked["outcomes"] == whole["outcomes"] and len(whole["outcomes"]) == 7
    for key in ("success", "episodes", "mean_return", "mean_turns", "invalid_action_rate"):
        assert chunked[key] == pytest.approx(whole[key]), key
    sampled, _ = run(3, 1.0)
    again, _ = run(3, 1.0)
    assert sampled["outcomes"].keys() == whole["outcomes"].keys()
    assert sampled == again  # chunks continue one seeded stream: repeatable
