"""Reward models: losses (hand-computed), rendering, batching, save/load, training."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from arborl.data.trajectory import Step, Trajectory
from arborl.models import load_policy, save_policy
from arborl.rewards.reward_model import (
    RM_CONFIG_FILE,
    RewardModel,
    bradley_terry_loss,
    collate,
    encode_trajectory,
    step_label_loss,
    step_prefixes,
)
from arborl.rewards.rm_data import PreferencePair, StepLabels
from arborl.train.rm import (
    evaluate_pairs,
    evaluate_steps,
    fit_reward_model,
    pairwise_accuracy,
    reliability_bins,
    roc_auc,
)
from arborl.train.rm_config import RMTrainConfig


def traj(actions: str, ret: float = 0.0, obs: str = "ab") -> Trajectory:
    steps = [Step(observation=f"{obs}{i}", action=a) for i, a in enumerate(actions)]
    steps[-1].reward = ret
    return Trajectory("t", "e", instruction="go", steps=steps, won=ret > 0)


def test_bradley_terry_loss_by_hand():
    chosen, rejected = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0])
    # -log sigmoid(2) = 0.126928, -log sigmoid(0) = 0.693147; mean 0.410038
    assert float(bradley_terry_loss(chosen, rejected)) == pytest.approx(0.410038, abs=1e-5)
    # margin 1 on the first pair: -log sigmoid(1) = 0.313262; mean (0.313262 + 0.693147) / 2
    margin = torch.tensor([1.0, 0.0])
    assert float(bradley_terry_loss(chosen, rejected, margin)) == pytest.approx(0.503204, abs=1e-5)


def test_step_label_loss_by_hand():
    scores = torch.tensor([[0.0, 0.0, 5.0]])
    labels = torch.tensor([[1.0, 0.5, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    # BCE(sigmoid(0), 1) = log 2; BCE(sigmoid(0), 0.5) = log 2; third step masked out
    assert float(step_label_loss(scores, labels, mask)) == pytest.approx(math.log(2), abs=1e-6)


def test_pairwise_accuracy_and_bins_by_hand():
    assert pairwise_accuracy([2.0, 1.0, 0.0], [1.0, 1.0, 3.0]) == pytest.approx(0.5)  # 1+.5+0
    bins = reliability_bins([0.05, 0.15, 0.12], [1.0, 0.0, 1.0], num_bins=10)
    assert bins[0]["n"] == 1 and bins[1]["n"] == 2
    assert bins[1]["pred"] == pytest.approx(0.135) and bins[1]["target"] == pytest.approx(0.5)


def test_roc_auc_by_hand():
    # positives 0.9, 0.4; negatives 0.5, 0.4, 0.1: pairs won 3 + 1 + 0.5 (tie) of 6
    assert roc_auc([0.9, 0.5, 0.4, 0.4, 0.1], [True, False, True, False, False]) == pytest.approx(
        4.5 / 6
    )
    assert roc_auc([0.1, 0.2], [True, True]) is None


@pytest.fixture(scope="module")
def orm() -> RewardModel:
    return RewardModel.from_spec("tiny-0.1m", "orm", max_length=64, seed=0)


def test_encode_marks_step_ends_and_truncates_left(orm):
    tok = orm.tokenizer
    t = traj("ud")
    enc = encode_trajectory(tok, t, max_length=1000, score_after_observation=False)
    text = tok.decode(enc.ids, skip_special_tokens=False)
    assert text == (
        "<|system|>go<|end|><|user|>ab0<|end|><|assistant|>u<|end|>"
        "<|user|>ab1<|end|><|assistant|>d<|end|>"
    )
    # each step ends on the <|end|> closing its assistant message, right after the action
    for end, action in zip(enc.step_ends, "ud"):
        assert tok.decode([enc.ids[end]]) == "<|end|>"
        assert tok.decode([enc.ids[end - 1]]) == action
    # the last 10 tokens are "u<|end|><|user|>ab1<|end|><|assistant|>d<|end|>": step 0's end
    # survives at index 1; with 8 tokens it is cut off (-1)
    short = encode_trajectory(tok, t, max_length=10, score_after_observation=False)
    assert short.step_ends == [1, 9]
    cut = encode_trajectory(tok, t, max_length=8, score_after_observation=False)
    assert cut.ids == enc.ids[-8:] and cut.step_ends == [-1, 7]


def test_steps_are_scored_after_the_next_observation(orm):
    tok = orm.tokenizer
    t = traj("ud")
    enc = encode_trajectory(tok, t, max_length=1000)  # default: score_after_observation
    # step 0 is read at the <|end|> closing "ab1" (the state it led to); the last step,
    # with no observation after it, at its response's end
    assert tok.decode(enc.ids[enc.step_ends[0] - 3 : enc.step_ends[0] + 1]) == "ab1<|end|>"
    assert enc.step_ends[1] == len(enc.ids) - 1
    t.meta["final_observation"] = "ab2"
    enc = encode_trajectory(tok, t, max_length=1000)
    assert tok.decode(enc.ids[-4:]) == "ab2<|end|>" and enc.step_ends[1] == len(enc.ids) - 1
    # a window of 1 step: only step 1 and the final observation are rendered
    win = encode_trajectory(tok, t, max_length=1000, max_history_steps=1)
    assert (
        tok.decode(win.ids)
        == "<|system|>go<|end|><|user|>ab1<|end|><|assistant|>d<|end|><|user|>ab2<|end|>"
    )
    assert win.step_ends == [-1, len(win.ids) - 1]
    prefixes = step_prefixes(t)
    assert [q.num_steps for q in prefixes] == [1, 2]
    assert [q.meta["final_observation"] for q in prefixes] == ["ab1", "ab2"]


def test_windowed_model_scores_each_step_from_its_prefix():
    rm = RewardModel.from_spec("tiny-0.1m", "prm", max_length=64, max_history_steps=1, seed=1)
    t = traj("udl")
    per_step = rm.score_steps([t])[0]
    assert per_step == pytest.approx([rm.score([q])[0] for q in step_prefixes(t)], abs=1e-5)
    assert rm.settings()["max_history_steps"] == 1


def test_collate_left_pads_so_the_last_column_is_every_last_token(orm):
    a, b = orm.encode([traj("u"), traj("udl")])
    ids, mask, ends = collate([a, b], orm.tokenizer.pad_token_id)
    assert ids.shape == (2, len(b.ids)) and mask[0].sum() == len(a.ids)
    assert ends[0].tolist() == [len(b.ids) - 1, -1, -1]
    assert ends[1, -1] == len(b.ids) - 1


def test_scores_do_not_depend_on_batching(orm):
    trajs = [traj("u"), traj("udl", 1.0), traj("lr"), traj("d" * 12)]
    one = orm.score_steps(trajs, batch_size=1)
    many = orm.score_steps(trajs, batch_size=4)
    for x, y in zip(one, many):
        assert x == pytest.approx(y, abs=1e-4, nan_ok=True)
    assert math.isnan(
        one[3][0]
    )  # 12 steps (~100 tokens) overflow the 64-token context: step 0 is cut off
    # the prefix of a trajectory scores like the trajectory's step
    prefix = step_prefixes(trajs[1])[1]  # steps 0-1, then step 2's observation
    assert orm.score([prefix])[0] == pytest.approx(many[1][1], abs=1e-4)
    assert orm.score(trajs) == [s[-1] for s in many]


def test_save_load_round_trip_is_a_plain_hf_checkpoint(orm, tmp_path):
    trajs = [traj("ud"), traj("l")]
    d = orm.save_pretrained(tmp_path / "rm")
    assert (d / RM_CONFIG_FILE).exists()
    again = RewardModel.from_pretrained(d)
    assert again.kind == "orm" and again.max_length == 64
    assert again.score(trajs) == pytest.approx(orm.score(trajs), abs=1e-6)
    hf = AutoModelForSequenceClassification.from_pretrained(d)  # any HF tool can load it
    ids = torch.tensor([orm.encode([trajs[0]])[0].ids])
    with torch.no_grad():
        direct = float(hf(input_ids=ids).logits[0, 0])
    assert direct == pytest.approx(orm.score([trajs[0]])[0], abs=1e-4)
    with pytest.raises(FileNotFoundError, match="arborl rm train"):
        RewardModel.from_pretrained(tmp_path)


def test_starts_from_a_causal_lm_checkpoint(tmp_path):
    policy, tok = load_policy("tiny-0.1m", seed=3)
    d = save_policy(policy, tok, tmp_path / "sft")
    rm = RewardModel.from_spec(str(d), "prm", seed=1)
    assert torch.equal(rm.net.model.embed_tokens.weight, policy.model.embed_tokens.weight)
    assert rm.kind == "prm"
    with pytest.raises(ValueError, match="kind"):
        RewardModel.from_spec("tiny-0.1m", "value")


def test_orm_learns_a_preference_and_prm_learns_step_labels():
    # Preferred trajectories end with "u", the others with "d": learnable from the text.
    pairs = [
        PreferencePair("t", traj("lr"[i % 2] + "u", 1.0), traj("lr"[i % 2] + "d"), 1.0)
        for i in range(8)
    ]
    orm = RewardModel.from_spec("tiny-0.1m", "orm", max_length=64, include_instruction=False)
    cfg = RMTrainConfig(kind="orm", data="-", steps=40, batch_size=8, lr=3e-3, warmup_steps=2)
    assert evaluate_pairs(orm, pairs)[0]["pairwise_accuracy"] < 1.0  # not solved at init
    fit_reward_model(orm, pairs, cfg)
    assert evaluate_pairs(orm, pairs)[0]["pairwise_accuracy"] == 1.0
    # Step label 1 after "u", 0 after "d".
    recs = [
        StepLabels(traj(a), [1.0 if c == "u" else 0.0 for c in a]) for a in ("ud", "du", "uu", "dd")
    ]
    prm = RewardModel.from_spec("tiny-0.1m", "prm", max_length=64, include_instruction=False)
    cfg = RMTrainConfig(kind="prm", data="-", steps=40, batch_size=4, lr=3e-3, warmup_steps=2)
    fit_reward_model(prm, recs, cfg)
    m, _ = evaluate_steps(prm, recs)
    assert m["step_accuracy"] == 1.0 and m["step_brier"] < 0.1
    with pytest.raises(ValueError, match="kind"):
        fit_reward_model(prm, pairs, RMTrainConfig(kind="orm", data="-", steps=1))


@pytest.mark.parametrize("window", [None, 1])
def test_context_only_steps_carry_no_loss(window):
    # The first step's NaN label is context: a PRM learns the labelled last steps only,
    # whether it reads whole trajectories or one-step windows.
    nan = float("nan")
    recs = [
        StepLabels(traj(a), [nan, 1.0 if a[1] == "u" else 0.0]) for a in ("uu", "du", "ud", "dd")
    ]
    prm = RewardModel.from_spec("tiny-0.1m", "prm", max_length=64, include_instruction=False,
                                max_history_steps=window)  # fmt: skip
    cfg = RMTrainConfig(kind="prm", data="-", steps=40, batch_size=4, lr=3e-3, warmup_steps=2)
    stats = fit_reward_model(prm, recs, cfg)
    assert math.isfinite(stats["rm/loss"])
    m, points = evaluate_steps(prm, recs)
    assert m["num_steps"] == 4 and m["step_accuracy"] == 1.0  # only the labelled steps
