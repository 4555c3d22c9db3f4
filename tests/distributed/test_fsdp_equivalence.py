"""2-rank FSDP2 (real gloo process group in two Ray actors) == the 1-process update.

One real rollout batch of the tiny policy on Maze gets GRPO advantages from the shared
`attach_advantages`; the local update (`actor_update` over `minibatch_schedule`) and the data-parallel update then take the
same minibatches (same generator) from the same weights. Small micro-batch budgets give
the two ranks different numbers of micro-batches, which the equalised loop must handle.
"""

from dataclasses import replace

import numpy as np
import pytest
import torch

from arborl.distributed.dispatch import WorkerGroup
from arborl.distributed.workers import TrainRole
from arborl.generation.hf import HFBackend
from arborl.models import ValueModel, load_policy
from arborl.rollout import draw_seeds, run_rollout
from arborl.train.build import lr_lambda
from arborl.train.config import load_train_config
from arborl.train.engine import CRITIC_KEYS, SCORE_KEYS
from arborl.train.rl import attach_advantages, batch_rewards
from arborl.train.update import (
    actor_update,
    critic_fit,
    critic_values,
    minibatch_schedule,
    score_rows,
)

KL = 0.1

OVERRIDES = [
    "model.name_or_path=tiny-0.1m",
    "rollout.num_tasks=4",
    "rollout.group_size=4",
    "rollout.max_turns=4",
    "algo.drop_zero_adv=false",
    "algo.minibatch_size=24",
    "algo.micro_batch_tokens=160",
    "algo.lr=1e-3",
    "algo.ppo_epochs=2",
    "algo.entropy_coef=0.01",
]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def _rollout_batch(cfg):
    model, tok = load_policy("tiny-0.1m", seed=0)
    rcfg = replace(cfg.rollout, seed=7)
    res = run_rollout(HFBackend(model, tok), tok, cfg.env.id, draw_seeds(4, 3), rcfg, cfg.agent,
                      env_kwargs=cfg.env.kwargs)  # fmt: skip
    return res.batch, len(res.trajectories)


def _group(ray, cfg, n=2):
    actor = ray.remote(TrainRole).options(num_cpus=0.5)
    group = WorkerGroup(TrainRole, [actor.remote(cfg, r, n, None) for r in range(n)])
    addr, port = group.call("rendezvous_address")
    info = group.call("setup", addr, port)
    assert [i["backend"] for i in info] == ["gloo", "gloo"]
    return group


def _minibatches(batch, algo, seed):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(algo.ppo_epochs):
        out.extend(
            batch.reorder(torch.randperm(len(batch), generator=gen)).split(algo.minibatch_size)
        )
    return out


def test_two_rank_fsdp2_ppo_update_matches_one_process(ray_instance):
    cfg = load_train_config(OVERRIDES)
    batch, n_traj = _rollout_batch(cfg)
    rewards, _ = batch_rewards(batch, n_traj, cfg.reward.sources)
    train, _ = attach_advantages(batch, rewards, cfg.algo, None)
    assert len(train) > 24  # several minibatches per epoch
    # The untrained policy's groups have no reward spread: draw advantages (seeded) so
    # the update has a real signal, and score a KL reference with other weights.
    train["adv"] = torch.randn(len(train), generator=torch.Generator().manual_seed(1))
    other, _ = load_policy("tiny-0.1m", seed=1)
    train["ref_logp"] = score_rows(other, train, 1.0, 10**6)

    # 1 process: the local trainer's update. One micro-batch per minibatch, so its logged
    # stats cover the whole minibatch (it logs the last micro-batch's); the update itself
    # does not depend on the budget (exact gradient accumulation, tests/train).
    model, _ = load_policy("tiny-0.1m", seed=0)
    # As RLTrainer builds them (the LR warm-up makes this step's LR lr / warmup_steps).
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.algo.lr, weight_decay=0.0)
    torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.algo.warmup_steps, 10, "constant"))
    one = replace(cfg.algo, micro_batch_tokens=10**6)
    local_mbs = minibatch_schedule(train, one, torch.Generator().manual_seed(5))
    up = actor_update(model, opt, local_mbs, local_mbs[0][:1], one, 1.0, KL)
    ref_state = model.state_dict()

    # 2 ranks: the same minibatches, each split across the ranks.
    group = _group(ray_instance, cfg)
    mbs = _minibatches(train, cfg.algo, 5)
    stats, skipped = group.call("update_actor", mbs, mbs[0][:1], 1.0, KL)
    assert skipped == 0 and stats["actor/optimizer_steps"] == up.stats["actor/optimizer_steps"]
    # The logged loss is the mean over optimizer steps of the whole-minibatch loss.
    for key in ("actor/pg_loss", "actor/kl", "actor/entropy"):
        assert abs(stats[key] - up.stats[key]) <= 1e-5 * abs(up.stats[key]), key
    assert up.stats["actor/grad_norm"] > 0
    assert (
        abs(stats["actor/grad_norm"] - up.stats["actor/grad_norm"])
        < 1e-5 * up.stats["actor/grad_norm"]
    )
    print(
        "pg_loss",
        stats["actor/pg_loss"],
        up.stats["actor/pg_loss"],
        "grad_norm",
        stats["actor/grad_norm"],
        up.stats["actor/grad_norm"],
    )
    full = group.call("full_state")
    assert set(full) >= {k for k in ref_state if "lm_head" not in k}
    worst = max(
        _rel(torch.from_numpy(np.array(full[k])), v) for k, v in ref_state.items() if k in full
    )
    print("worst rel weight diff", worst)
    assert worst < 1e-5, worst
    # Sharding is real: each rank holds about half of the parameters.
    mem = group.call("memory_bytes")
    total = sum(v.numel() * 4 for v in model.parameters())
    assert all(0.4 * total < m["params"] < 0.6 * total for m in mem), (mem, total)
    for h in group.handles:
        ray_instance.kill(h)


@pytest.mark.slow
def test_two_rank_reference_critic_values_and_critic_update_match_one_process(ray_instance):
    cfg = load_train_config([*OVERRIDES, "algo=ppo", "algo.kl_coef=0.1"])
    batch, _ = _rollout_batch(cfg)
    group = _group(ray_instance, cfg)
    score = batch.select(*SCORE_KEYS)
    # Reference log-probs (dp_split over the ranks, padded and unpadded) vs 1 process.
    ref, _ = load_policy("tiny-0.1m", seed=0)
    local_ref = score_rows(ref, batch, 1.0, 10**6)
    dist_ref = group.call("ref_logp", score, 1.0).tensors["ref_logp"]
    mask = batch.tensors["response_mask"]  # padding positions hold no logprob
    assert dist_ref.shape == local_ref.shape and _rel(dist_ref * mask, local_ref * mask) < 1e-5
    # Critic values, then one critic update from the same minibatches.
    critic = ValueModel.from_policy_spec("tiny-0.1m", seed=cfg.model.seed + 1)
    with torch.no_grad():
        local_v = critic_values(critic, batch, 10**6)
    dist_v = group.call("values", score).tensors["values"]
    assert _rel(dist_v, local_v) < 1e-5
    rewards = torch.randn(len(batch), generator=torch.Generator().manual_seed(2))
    attach_advantages(batch, rewards, cfg.algo, local_v)
    opt = torch.optim.AdamW(critic.parameters(), lr=cfg.algo.critic_lr)  # as RLTrainer
    one = replace(cfg.algo, micro_batch_tokens=10**6)
    local_mbs = minibatch_schedule(batch, one, torch.Generator().manual_seed(3))
    up = critic_fit(critic, opt, local_mbs, local_mbs[0][:1], one)
    mbs = _minibatches(batch.select(*CRITIC_KEYS), cfg.algo, 3)
    stats, skipped = group.call("update_critic", mbs, mbs[0][:1])
    assert skipped == 0
    assert abs(stats["critic/value_loss"] - up.stats["critic/value_loss"]) <= 1e-5 * abs(
        up.stats["critic/value_loss"]
    )
    with torch.no_grad():
        after_local = critic_values(critic, batch, 10**6)
    after_dist = group.call("values", score).tensors["values"]
    assert _rel(after_dist - dist_v, after_local - local_v) < 1e-4  # the change itself
    assert _rel(after_dist, after_local) < 1e-5
    for h in group.handles:
        ray_instance.kill(h)
