"""Reward models on a real byte-level BPE tokenizer (the `bpe-tiny-0.1m` preset).

A reward model reads the trajectory as a rendered chat and scores each step at a token
found by tokenizing each prefix of the chat. With BPE that only works if a prefix's ids are
a prefix of the whole's (ChatML's `<|im_end|>` and `<|im_start|>` are special tokens, so
they are); these tests hold the scores to it, then train, save and reload both kinds.
"""

from __future__ import annotations

import json

import pytest

from arborl.cli.main import main
from arborl.data import write_trajectories
from arborl.data.trajectory import Step, Trajectory
from arborl.rewards.reward_model import RewardModel, encode_trajectory, trajectory_messages
from arborl.rewards.rm_data import MixedPolicy, PreferencePair, StepLabels
from arborl.rollout import RolloutConfig, run_episodes_with_policy
from arborl.train.rm import evaluate_pairs, evaluate_steps, fit_reward_model
from arborl.train.rm_config import RMTrainConfig

OBS = "Numbers: 1 2 7 8. Target: 58.\n#.#A"
"""BPE-awkward text: digits and spaces merge with their neighbours, a newline inside."""


def traj(actions: list[str], ret: float = 0.0) -> Trajectory:
    steps = [Step(observation=f"{OBS} {i}", action=a) for i, a in enumerate(actions)]
    steps[-1].reward = ret
    return Trajectory("t", "e", instruction="go 🌲", steps=steps, won=ret > 0)


@pytest.fixture(scope="module")
def orm() -> RewardModel:
    return RewardModel.from_spec("bpe-tiny-0.1m", "orm", max_length=512, seed=0)


def test_each_step_is_scored_at_the_end_of_the_message_it_is_read_after(orm):
    tok = orm.tokenizer
    t = traj(["(1 + 2) * 7", " 8 🌲", "up"])
    enc = encode_trajectory(tok, t, max_length=512)
    whole = tok.apply_chat_template(trajectory_messages(t), tokenize=False)
    assert enc.ids == tok.encode(whole, add_special_tokens=False)
    # step t is read after the next observation (the last step after its own response),
    # on the newline that closes that message
    after = [f"{OBS} 1<|im_end|>\n", f"{OBS} 2<|im_end|>\n", "up<|im_end|>\n"]
    for end, text in zip(enc.step_ends, after):
        assert tok.decode(enc.ids[: end + 1]).endswith(text)
    cut = encode_trajectory(tok, t, max_length=40)
    assert cut.ids == enc.ids[-40:]
    assert cut.step_ends == [-1 if e < len(enc.ids) - 40 else e - (len(enc.ids) - 40)
                             for e in enc.step_ends]  # fmt: skip


@pytest.mark.slow
def test_bpe_orm_and_prm_learn_and_reload_with_the_same_scores(tmp_path):
    pairs = [
        PreferencePair("t", traj([f"go {i}", "down"], 1.0), traj([f"go {i}", "up"]), 1.0)
        for i in range(8)
    ]
    orm = RewardModel.from_spec("bpe-tiny-0.1m", "orm", max_length=96, include_instruction=False)
    cfg = RMTrainConfig(kind="orm", data="-", steps=40, batch_size=8, lr=3e-3, warmup_steps=2)
    assert evaluate_pairs(orm, pairs)[0]["pairwise_accuracy"] < 1.0  # not solved at init
    fit_reward_model(orm, pairs, cfg)
    assert evaluate_pairs(orm, pairs)[0]["pairwise_accuracy"] == 1.0
    recs = [StepLabels(traj(a), [1.0 if x == "up" else 0.0 for x in a])
            for a in (["up", "down"], ["down", "up"], ["up", "up"], ["down", "down"])]  # fmt: skip
    prm = RewardModel.from_spec("bpe-tiny-0.1m", "prm", max_length=96, include_instruction=False)
    cfg = RMTrainConfig(kind="prm", data="-", steps=80, batch_size=4, lr=3e-3, warmup_steps=2)
    fit_reward_model(prm, recs, cfg)
    m, _ = evaluate_steps(prm, recs)
    assert m["step_accuracy"] == 1.0 and m["step_brier"] < 0.1
    again = RewardModel.from_pretrained(prm.save_pretrained(tmp_path / "prm"))
    t = traj(["(1 + 2) * 7", " 8 🌲"])
    assert again.encode([t])[0].ids == prm.encode([t])[0].ids  # the BPE tokenizer reloaded
    assert again.score_steps([t])[0] == pytest.approx(prm.score_steps([t])[0], abs=1e-6)


@pytest.mark.slow
def test_arborl_rm_train_and_eval_with_the_bpe_preset(tmp_path, capsys):
    cfg = RolloutConfig(group_size=4, seed=0)
    res = run_episodes_with_policy(
        MixedPolicy(0.3, seed=0), "arborl/Maze-v0", [1, 2, 3], cfg, "train",
        {"short_actions": True},
    )  # fmt: skip
    write_trajectories(tmp_path / "t.jsonl", res.trajectories)
    pairs, steps = tmp_path / "pairs.jsonl", tmp_path / "steps.jsonl"
    assert main(["rm", "data", str(tmp_path / "t.jsonl"), "--pairs", str(pairs), "--steps",
                 str(steps), "--policy", "mixed:0.5", "--num-rollouts", "2",
                 "--max-trajectories", "2", "--env-kwargs", '{"short_actions": true}']) == 0  # fmt: skip
    for kind, data in (("orm", pairs), ("prm", steps)):
        assert main(["rm", "train", "--kind", kind, "--model", "bpe-tiny-0.1m", "--data",
                     str(data), "--steps", "3", "--max-length", "256",
                     "--out", str(tmp_path / kind)]) == 0  # fmt: skip
        saved = json.loads((tmp_path / kind / "model" / "config.json").read_text())
        assert saved["vocab_size"] == 50259 and saved["pad_token_id"] == 50256
    out = tmp_path / "eval"
    assert main(["rm", "eval", str(tmp_path / "prm" / "model"), "--pairs", str(pairs),
                 "--steps", str(steps), "--out", str(out)]) == 0  # fmt: skip
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0 <= metrics["pairwise_accuracy"] <= 1 and 0 <= metrics["step_accuracy"] <= 1
