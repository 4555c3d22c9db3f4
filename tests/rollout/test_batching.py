"""The two training views, checked token by token against what was generated, and the
rollout logprobs re-scored by the model (`token_logprobs`)."""

import pytest
import torch

from arborl.agent import AgentConfig
from arborl.models import token_logprobs
from arborl.rollout import RolloutConfig, run_rollout

MAZE = "arborl/Maze-v0"


@pytest.fixture
def step_result(policy, backend):
    cfg = RolloutConfig(group_size=2, max_new_tokens=5, max_turns=4, temperature=0.7)
    return run_rollout(backend, policy[1], MAZE, [3, 4], cfg, AgentConfig())


@pytest.fixture
def episode_result(policy, backend):
    cfg = RolloutConfig(view="episode", group_size=2, max_new_tokens=5, max_turns=4, top_k=20)
    return run_rollout(backend, policy[1], MAZE, [3, 4], cfg, AgentConfig())


def test_step_view_layout(step_result):
    b, eps = step_result.batch, step_result.episodes
    p_len, a_len = b.info["prompt_length"], b.info["response_length"]
    assert b.info["scored_choices"] is False  # generated rows, declared by the batch
    rows = [(ep, i, t) for ep in eps for i, t in enumerate(ep.turns)]
    assert len(b) == len(rows) == sum(len(ep.turns) for ep in eps)
    assert b["input_ids"].shape == b["attention_mask"].shape == (len(rows), p_len + a_len)
    assert b["response_mask"].shape == b["old_logp"].shape == (len(rows), a_len)
    for r, (ep, i, t) in enumerate(rows):
        p, a = len(t.prompt_ids), len(t.response_ids)
        ids, mask = b["input_ids"][r].tolist(), b["attention_mask"][r].tolist()
        assert ids[p_len - p : p_len] == t.prompt_ids  # prompt left-padded to P
        assert ids[p_len : p_len + a] == t.response_ids  # response right-padded to A
        assert mask == [0] * (p_len - p) + [1] * (p + a) + [0] * (a_len - a)
        assert b["response_mask"][r].tolist() == [1.0] * a + [0.0] * (a_len - a)
        assert b["old_logp"][r, :a].tolist() == pytest.approx(t.logprobs)
        assert b.meta["traj_id"][r] == ep.traj_id and b.meta["step"][r] == i
        assert b.meta["anchor"][r] == t.anchor and isinstance(t.anchor, tuple)
        assert b.meta["done"][r] == (i == len(ep.turns) - 1)
        assert float(b["episode_return"][r]) == ep.total_return
    assert hash(b.meta["anchor"][0]) is not None


def test_episode_view_is_token_exact(episode_result):
    """Every turn's prompt is a prefix of the final sequence; every generated id sits
    verbatim right after it; loss_mask is 1 exactly there; rewards on each turn's end."""
    b = episode_result.batch
    for r, ep in enumerate(episode_result.episodes):
        n = int(b["attention_mask"][r].sum())
        seq = b["input_ids"][r, :n].tolist()
        expected_mask = [0.0] * b["input_ids"].shape[1]
        expected_reward = [0.0] * b["input_ids"].shape[1]
        for t in ep.turns:
            p, a = len(t.prompt_ids), len(t.response_ids)
            assert seq[:p] == t.prompt_ids
            assert seq[p : p + a] == t.response_ids
            expected_mask[p : p + a] = [1.0] * a
            expected_reward[p + a - 1] += t.reward
        assert seq[: len(ep.turns[-1].prompt_ids) + len(ep.turns[-1].response_ids)] == seq
        assert b["loss_mask"][r].tolist() == expected_mask
        assert b["token_reward"][r].tolist() == expected_reward
        gen = [x for x, m in zip(seq, expected_mask) if m]
        assert gen == [i for t in ep.turns for i in t.response_ids]
        assert b.meta["num_turns"][r] == len(ep.turns)
        assert b["old_logp"][r][b["loss_mask"][r] == 0].abs().sum() == 0
        assert b["turn_index"][r, n:].eq(-1).all()


def test_episode_view_observation_tokens_follow_the_template(policy, episode_result):
    """Between two turns sit the end token (inserted when the turn was cut by length) and
    the next observation's user message, tokenized on its own."""
    tok = policy[1]
    ep = episode_result.episodes[0]
    t0, t1 = ep.turns[0], ep.turns[1]
    between = t1.prompt_ids[len(t0.prompt_ids) + len(t0.response_ids) :]
    ended = t0.response_ids[-1] == tok.eos_token_id
    text = ("" if ended else "<|end|>") + f"<|user|>{t1.observation}<|end|><|assistant|>"
    assert tok.decode(between) == text


@pytest.mark.parametrize("view", ["step", "episode"])
def test_old_logp_matches_rescoring(policy, backend, view):
    model, tok = policy
    temperature = 0.7
    cfg = RolloutConfig(
        view=view, group_size=2, max_new_tokens=5, max_turns=3, temperature=temperature
    )
    b = run_rollout(backend, tok, MAZE, [5, 6], cfg, AgentConfig()).batch
    with torch.no_grad():
        scored = token_logprobs(model, b["input_ids"], b["attention_mask"], temperature)
    if view == "step":
        p_len, a_len = b.info["prompt_length"], b.info["response_length"]
        scored, mask, old = (
            scored[:, p_len - 1 : p_len - 1 + a_len],
            b["response_mask"],
            b["old_logp"],
        )
    else:
        mask, old = b["loss_mask"][:, 1:], b["old_logp"][:, 1:]
    assert mask.sum() > 0
    diff = ((scored - old) * mask).abs().max()
    assert diff < 1e-4, diff


def test_step_and_episode_views_see_the_same_prompts(policy):
    """With the char tokenizer a full-memory rebuilt prompt equals the growing context, so
    the same seed gives the same episodes in both views."""
    from arborl.generation.hf import HFBackend

    model, tok = policy
    runs = {}
    for view in ("step", "episode"):
        cfg = RolloutConfig(view=view, num_tasks=2, max_new_tokens=4, max_turns=3, seed=3)
        res = run_rollout(HFBackend(model, tok), tok, MAZE, None, cfg, AgentConfig())
        runs[view] = [t.prompt_ids for ep in res.episodes for t in ep.turns]
    assert runs["step"] == runs["episode"]
