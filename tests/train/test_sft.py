"""SFT examples rebuild exactly the prompts the rollout's step view trains on; the loss
mask covers the response and its end token only; a few steps on oracle demos lower the loss."""

from dataclasses import replace

import pytest
import torch

from arborl.agent import AgentConfig, encode_text
from arborl.generation.hf import HFBackend
from arborl.models import load_policy
from arborl.rollout import RolloutConfig, run_rollout
from arborl.train.config import SFTConfig, load_train_config
from arborl.train.sft import build_sft_examples, collate, load_demos, run_sft, sft_loss

MAZE = "arborl/Maze-v0"


def test_prompts_match_the_rollout_step_view():
    model, tok = load_policy("tiny-0.1m")
    # A memory of 2 past turns and a system prompt: both must be rebuilt the same way.
    agent = AgentConfig(memory="last_k", memory_k=2, system_prompt="Solve the maze.")
    cfg = RolloutConfig(num_tasks=2, group_size=2, max_turns=4, max_new_tokens=4, seed=3)
    res = run_rollout(HFBackend(model, tok), tok, MAZE, None, cfg, agent)
    b = res.batch
    P = b.info["prompt_length"]
    rollout_prompts = {}
    for r in range(len(b)):
        attn = b.tensors["attention_mask"][r, :P].bool()
        rollout_prompts[(b.meta["traj_id"][r], int(b.meta["step"][r]))] = b.tensors["input_ids"][
            r, :P
        ][attn].tolist()
    examples = build_sft_examples(res.trajectories, tok, agent)
    sft_prompts = {}
    k = 0
    for ep, traj in zip(res.episodes, res.trajectories, strict=True):
        for i in range(len(traj.steps)):
            sft_prompts[(ep.traj_id, i)] = examples[k].prompt_ids
            k += 1
    assert k == len(examples) == len(b) > len(res.trajectories)  # multi-turn episodes
    assert sft_prompts == rollout_prompts


def test_loss_mask_covers_exactly_response_and_eos():
    _, tok = load_policy("tiny-0.1m")
    from arborl.train.sft import SFTExample

    eos = tok.eos_token_id
    # Sequence 0: prompt [5, 6, 7], response [8, 9] + eos -> 6 tokens; sequence 1 is shorter.
    ex = [SFTExample([5, 6, 7], [8, 9, eos]), SFTExample([5], [8, eos])]
    b = collate(ex, pad_id=tok.pad_token_id)
    assert b["input_ids"][0].tolist() == [5, 6, 7, 8, 9, eos]
    assert b["input_ids"][1, :3].tolist() == [5, 8, eos]
    assert b["attention_mask"].tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]]
    # loss_mask[t] = 1 where token t+1 is a target: tokens 3, 4, 5 (8, 9, eos) -> t = 2, 3, 4.
    assert b["loss_mask"].tolist() == [[0, 0, 1, 1, 1], [1, 1, 0, 0, 0]]


def test_response_ids_end_with_eos():
    _, tok = load_policy("tiny-0.1m")
    cfg = load_train_config(["sft.num_demos=2"])
    demos = load_demos(cfg)
    ex = build_sft_examples(demos, tok, cfg.agent)
    first = demos[0].steps[0]
    assert ex[0].response_ids == encode_text(tok, first.action) + [tok.eos_token_id]


def test_sft_on_oracle_maze_demos_lowers_the_loss():
    model, tok = load_policy("tiny-0.1m")
    cfg = load_train_config(["sft.num_demos=8"])
    examples = build_sft_examples(load_demos(cfg), tok, cfg.agent)
    probe = collate(examples[:32], tok.pad_token_id)
    with torch.no_grad():
        before = float(sft_loss(model, probe)[0])
    sft = replace(SFTConfig(), steps=15, batch_size=16, lr=3e-3, warmup_steps=2)
    logged = []

    class _Logger:
        def log(self, step, stats, advance=0):
            logged.append((step, stats["sft/loss"]))

    run_sft(model, tok, examples, sft, logger=_Logger())
    with torch.no_grad():
        after = float(sft_loss(model, probe)[0])
    assert [s for s, _ in logged] == list(range(15))
    assert after < 0.8 * before, (before, after)
    assert not model.training


def test_prompts_left_cut_to_max_prompt_tokens_match_the_rollout():
    # The rollout left-cuts prompts over rollout.max_prompt_tokens; SFT must train on the
    # same cut prompts (a 2-turn memory of Maze makes them ~150-250 tokens: 60 cuts all).
    model, tok = load_policy("tiny-0.1m")
    agent = AgentConfig(memory="last_k", memory_k=2)
    cfg = RolloutConfig(num_tasks=2, group_size=1, max_turns=3, max_new_tokens=4, seed=5,
                        max_prompt_tokens=60)  # fmt: skip
    res = run_rollout(HFBackend(model, tok), tok, MAZE, None, cfg, agent)
    b, P = res.batch, res.batch.info["prompt_length"]
    rollout_prompts = [
        b.tensors["input_ids"][r, :P][b.tensors["attention_mask"][r, :P].bool()].tolist()
        for r in range(len(b))
    ]
    assert res.stats["prompt_truncations"] == len(b) and {len(p) for p in rollout_prompts} == {60}
    examples = build_sft_examples(res.trajectories, tok, agent, max_prompt_tokens=60)
    assert [e.prompt_ids for e in examples] == rollout_prompts
    uncut = build_sft_examples(res.trajectories, tok, agent)
    assert all(len(e.prompt_ids) > 60 for e in uncut)


def test_oracle_demos_run_in_env_pool_mode_with_the_pool_options(pool_mode_spy):
    cfg = load_train_config(["sft.num_demos=3", "env.pool_mode=subprocess", "env.timeout_s=9"])
    demos = load_demos(cfg)
    assert len(demos) == 3 and all(t.won for t in demos)
    [(mode, kw)] = pool_mode_spy
    assert mode == "subprocess" and kw["timeout_s"] == 9.0 and kw["split"] == "train"
    assert kw["short_actions"] is True  # env.kwargs still reach the env


@pytest.mark.parametrize("preset", ["tiny-0.1m", "envbpe-tiny-0.1m"])
def test_sft_loss_scores_only_responses_and_equals_the_full_scoring(preset):
    """The LM head runs on the response positions only; loss and gradients are those of
    scoring every position with `token_logprobs` and masking (rows of mixed lengths)."""
    from arborl.models.scoring import token_logprobs
    from arborl.train.sft import SFTExample

    model, tok = load_policy(preset)
    eos = tok.eos_token_id
    ex = [SFTExample([5, 6, 7, 9, 11, 12], [8, 9, eos]), SFTExample([5], [8, eos]),
          SFTExample([7, 7], [eos]), SFTExample(list(range(20, 44)), [30, 31, 32, 33, eos])]  # fmt: skip
    b = collate(ex, pad_id=tok.pad_token_id)
    loss, stats = sft_loss(model, b)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    logp = token_logprobs(model, b["input_ids"], b["attention_mask"])
    full = -(logp * b["loss_mask"]).sum() / b["loss_mask"].sum()
    full_grads = torch.autograd.grad(full, list(model.parameters()))
    assert stats["sft/tokens"] == 3 + 2 + 1 + 5
    torch.testing.assert_close(loss, full, rtol=1e-6, atol=1e-6)
    for g, f in zip(grads, full_grads):
        torch.testing.assert_close(g, f, rtol=1e-4, atol=1e-6)


def test_an_sft_step_in_length_chunks_has_the_gradient_of_one_padded_batch(monkeypatch):
    """`sft_backward` runs the batch shortest first in chunks of at most SFT_CHUNK_TOKENS
    padded tokens; loss and gradient are those of `sft_loss` over the whole batch."""
    import arborl.train.sft as sft
    from arborl.train.sft import SFTExample, sft_backward

    model, tok = load_policy("envbpe-tiny-0.1m")
    eos = tok.eos_token_id
    ex = [
        SFTExample(list(range(10, 10 + n)), [30, 31, eos][: 1 + n % 3]) for n in (30, 3, 12, 7, 25)
    ]
    loss, stats = sft_loss(model, collate(ex, tok.pad_token_id))
    whole = torch.autograd.grad(loss, list(model.parameters()))
    shapes = []
    real = sft.response_logprobs
    monkeypatch.setattr(sft, "response_logprobs",
                        lambda m, b: shapes.append(tuple(b["input_ids"].shape)) or real(m, b))  # fmt: skip
    monkeypatch.setattr(sft, "SFT_CHUNK_TOKENS", 3 * 15)
    model.zero_grad()
    chunked = sft_backward(model, ex, tok.pad_token_id)
    assert shapes == [(3, 13), (1, 27), (1, 31)]  # lengths 3+1, 7+2, 12+1; 25+2; 30+1
    assert chunked["sft/tokens"] == stats["sft/tokens"]
    assert chunked["sft/loss"] == pytest.approx(stats["sft/loss"], rel=1e-6)
    for p, g in zip(model.parameters(), whole):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
