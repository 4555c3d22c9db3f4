"""Quality scorers: registered names, `module:attr` callables and a real tiny LM scorer,
and the quality stage dropping rows below `quality.min_score`."""

import math

import pytest
import torch

from arborl.curate import CurateConfig, SourceConfig, curate, make_scorer, register_scorer
from arborl.curate.scoring import SCORERS, LMLogprobScorer, score_all
from arborl.data import Step, Trajectory


def valid_fraction(trajectories):
    """A simple real scorer: the share of steps whose action the env accepted."""
    return [sum(s.info.get("valid_action", True) for s in t.steps) / max(1, len(t.steps))
            for t in trajectories]  # fmt: skip


TRAJS = [
    Trajectory(
        "a", "e", steps=[Step("o", "up", reward=1.0, info={"valid_action": True})], won=True
    ),
    Trajectory(
        "b", "e", steps=[Step("o", "x", info={"valid_action": False}), Step("o", "up", reward=0.5)]
    ),  # fmt: skip
]


def test_builtin_and_module_attr_scorers():
    assert make_scorer("return")(TRAJS) == [1.0, 0.5]
    assert make_scorer("won")(TRAJS) == [1.0, 0.0]
    assert make_scorer("tests.curate.test_scoring:valid_fraction")(TRAJS) == [1.0, 0.5]
    with pytest.raises(ValueError, match="Did you mean 'return'"):
        make_scorer("retrun")
    with pytest.raises(ValueError, match="cannot import"):
        make_scorer("no_such_module_xyz:f")


def test_register_scorer_and_batching():
    calls = []

    def factory(bonus=0.0):
        def score(trajs):
            calls.append(len(trajs))
            return [len(t.steps) + bonus for t in trajs]

        return score

    register_scorer("num_steps_test", factory, overwrite=True)
    try:
        s = make_scorer("num_steps_test", {"bonus": 0.5})
        assert score_all(s, TRAJS * 3, batch_size=4) == [1.5, 2.5] * 3
        assert calls == [4, 2]
        with pytest.raises(ValueError, match="already registered"):
            register_scorer("num_steps_test", factory)
    finally:
        SCORERS.pop("num_steps_test")
    with pytest.raises(ValueError, match="returned 1 scores for 2"):
        score_all(lambda t: [0.0], TRAJS, batch_size=8)


def test_lm_logprob_matches_a_direct_computation():
    scorer = LMLogprobScorer(model="tiny-0.1m", seed=0)
    (got,) = scorer([Trajectory("a", "e", steps=[Step("ab", "cd")])])
    tok, model = scorer.tokenizer, scorer.model
    ids = tok.encode("ab", add_special_tokens=False) + tok.encode("cd", add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()  # (T, V)
    lp = torch.log_softmax(logits, -1)
    # the two response tokens "c", "d" are predicted at positions 1 and 2
    expected = (lp[1, ids[2]] + lp[2, ids[3]]).item() / 2
    assert math.isclose(got, expected, rel_tol=1e-4)
    assert got < 0


def test_quality_stage_drops_below_min_score(tmp_path):
    from arborl.data import write_trajectories

    write_trajectories(tmp_path / "t.jsonl", TRAJS)
    cfg = CurateConfig(sources=[SourceConfig(path=str(tmp_path / "t.jsonl"))])
    cfg.quality.scorer, cfg.quality.min_score = "tests.curate.test_scoring:valid_fraction", 0.75
    cfg.split.ratios = {"train": 1.0}
    records, report = curate(cfg)
    assert [r.traj.task_id for r in records] == ["a"] and records[0].score == 1.0
    (drop,) = report.dropped
    assert drop["stage"] == "quality" and drop["reason"] == "score 0.5 < quality.min_score=0.75"


def test_reward_model_scorer_matches_the_model(tmp_path):
    from arborl.rewards.reward_model import RewardModel

    rm = RewardModel.from_spec("tiny-0.1m", seed=3)
    rm.save_pretrained(tmp_path / "rm")
    scorer = make_scorer("reward_model", {"path": str(tmp_path / "rm")})
    prompt_only = Trajectory("c", "e", instruction="task only")
    got = scorer([*TRAJS, prompt_only])
    with torch.no_grad():
        expected = RewardModel.from_pretrained(tmp_path / "rm").eval().score(TRAJS)
    assert got[:2] == pytest.approx(expected, abs=1e-5) and got[2] == float("-inf")
    assert got[0] != got[1]  # different episodes, different scores
