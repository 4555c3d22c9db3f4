"""One builder for the parts of a run, used by every place that needs them: the local
engine, the Ray train ranks and rollout workers, checkpoint export and `arborl sft`.

Each function takes the run's `TrainConfig` (plus what it builds on) and returns one part,
built the same way wherever it is called, so a 2-rank Ray run and a local run start from
identical weights, optimizers and schedules:

  policy (+LoRA)  `build_policy`     critic       `build_critic` (None without one)
  reference       `build_reference`  optimizers   `build_optimizer`, `build_critic_optimizer`
  KL control      `build_kl_controller`          env pools    `build_pool_set`,
  LR schedule     `scheduler_step`                              `build_train_pool`

The agent settings saved with a policy are `arborl.agent.settings` (one writer, one reader).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import warnings
from typing import Any

import torch

from arborl import algos
from arborl.envs import make_pool
from arborl.envs.poolset import PoolSet
from arborl.models import ValueModel, apply_lora, autocast_ctx, load_policy
from arborl.rollout.config import with_turn_limit
from arborl.train.advantages import get_algorithm
from arborl.train.config import TrainConfig


def lr_lambda(warmup: int, total: int, schedule: str = "cosine", floor: float = 0.1):
    """Linear warm-up to 1, then constant, cosine or linear decay to `floor`."""

    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        frac = min(1.0, (step - warmup) / max(1, total - warmup))
        if schedule == "linear":
            return floor + (1 - floor) * (1 - frac)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac))

    return f


def set_threads(cfg: TrainConfig) -> None:
    """torch intra-op threads of this process (`trainer.num_threads`; None keeps torch's)."""
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)


def needs_critic(cfg: TrainConfig) -> bool:
    """Does `algo.name` train a value model? (its `Algorithm` record says)"""
    return get_algorithm(cfg.algo.name).needs_critic


def compute_dtype(cfg: TrainConfig, model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """The block every forward and backward of `model` runs in: autocast to `model.dtype`
    on `model`'s device (a no-op for float32); the weights stay float32."""
    device = next(model.parameters()).device.type
    return autocast_ctx(cfg.model.dtype, device_type=device)


def build_policy(cfg: TrainConfig, path: str | None = None):
    """(model, tokenizer): `path` (a saved policy) or `model.name_or_path`, + LoRA.

    The weights are float32 whatever `model.dtype` says: bf16 is mixed precision (the
    forward and backward passes run under `compute_dtype`), never bf16 master weights."""
    m = cfg.model
    model, tokenizer = load_policy(path or m.name_or_path, dtype="float32", seed=m.seed)
    if m.lora_rank:
        model = apply_lora(model, r=m.lora_rank, alpha=m.lora_alpha, seed=m.seed)
    return model, tokenizer


def build_critic(cfg: TrainConfig) -> ValueModel | None:
    """The value model (same architecture as the policy spec, its own seed), if needed."""
    if not needs_critic(cfg):
        return None
    return ValueModel.from_policy_spec(cfg.model.name_or_path, seed=cfg.model.seed + 1)


def build_reference(cfg: TrainConfig, policy) -> torch.nn.Module | None:
    """A frozen copy of `policy` (LoRA included) when a KL term needs one (`algo.kl_coef`).
    Build it from the policy RL starts from: after a warm start, re-sync it."""
    if cfg.algo.kl_coef <= 0 and not get_algorithm(cfg.algo.name).needs_reference:
        return None
    return copy.deepcopy(policy).requires_grad_(False)


def build_optimizer(cfg: TrainConfig, model):
    """(AdamW over the trainable parameters, its LR schedule over `trainer.total_steps`)."""
    a = cfg.algo
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(a.warmup_steps, cfg.trainer.total_steps, a.lr_schedule)
    )
    return opt, sched


def build_critic_optimizer(cfg: TrainConfig, critic) -> torch.optim.Optimizer | None:
    return None if critic is None else torch.optim.AdamW(critic.parameters(), lr=cfg.algo.critic_lr)


def build_kl_controller(cfg: TrainConfig):
    """Adaptive toward `algo.kl_target` when it is set, else fixed at `algo.kl_coef`."""
    a = cfg.algo
    if a.kl_target is not None:
        return algos.make_kl_controller("adaptive", a.kl_coef, a.kl_target)
    return algos.make_kl_controller("fixed", a.kl_coef)


def pool_options(cfg: TrainConfig) -> dict[str, Any]:
    """The per-call deadline and error budget of the run's env pools (`env.timeout_s`,
    `env.max_env_errors`) and the servers to use (`env.urls`, with the ARBORL_TOKEN
    token), for training and evaluation pools alike."""
    opts: dict[str, Any] = {"timeout_s": cfg.env.timeout_s,
                            "max_env_errors": cfg.env.max_env_errors}  # fmt: skip
    if cfg.env.urls:
        opts["urls"] = list(cfg.env.urls)
        opts["token"] = os.environ.get("ARBORL_TOKEN")
    return opts


def build_pool_set(cfg: TrainConfig) -> PoolSet:
    """The run's env pools (`arborl.envs.poolset.PoolSet`: built on first use, kept for
    the run, closed by the engine at its end): `env.id` in `env.pool_mode` with
    `pool_options`, over `env.num_workers` worker processes shared by the training,
    demo and evaluation pools."""
    return PoolSet(cfg.env.id, cfg.env.pool_mode, cfg.env.num_workers, **pool_options(cfg))


def build_train_pool(cfg: TrainConfig, num_envs: int | None = None, pools: PoolSet | None = None):
    """The training env pool in `env.pool_mode` (default: one env per episode of a step):
    the one of the run's `pools` (kept open), or, without, a pool of its own."""
    n = num_envs if num_envs is not None else cfg.rollout.num_tasks * cfg.rollout.group_size
    env_kwargs = with_turn_limit(cfg.env.kwargs, cfg.rollout.max_turns)
    if pools is not None:
        return pools.get(n, cfg.env.train_split, **env_kwargs)
    opts = {**pool_options(cfg), **env_kwargs}
    return make_pool(cfg.env.id, n, cfg.env.pool_mode, split=cfg.env.train_split, **opts)


def scheduler_step(sched) -> float:
    """Advance the LR schedule one RL step; returns the new LR. The schedule counts RL
    steps, and a step whose rows all had zero advantage took no optimizer step, which
    torch warns about: expected here, so silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        sched.step()
    return float(sched.get_last_lr()[0])
