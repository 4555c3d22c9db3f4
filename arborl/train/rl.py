"""The local RL trainer: rollout -> rewards -> old/ref logprobs -> values -> advantages ->
PPO epochs -> critic -> metrics, one RL step after another.

    trainer = RLTrainer(load_train_config(["algo=grpo"]))
    summary = trainer.fit()

`fit` runs the SFT warm start (unless resuming), a held-out evaluation, the RL steps with
periodic evaluations and checkpoints, a final evaluation, plots and `summary.json`.
Every random draw flows from `trainer.seed` and the step number, or from generators kept
in the checkpoint, so a resumed run replays the remaining steps exactly.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from arborl import algos
from arborl.config import to_dict
from arborl.data import write_trajectories
from arborl.data.tasks import read_task_seeds, sample_task_seeds
from arborl.envs import make_pool
from arborl.generation.hf import HFBackend
from arborl.models import ValueModel, apply_lora, load_policy
from arborl.rewards import combine_rewards, configure_rm_source
from arborl.rewards.rm_source import rm_fields
from arborl.rollout import draw_seeds, run_rollout
from arborl.train.advantages import compute_advantages, episode_lengths
from arborl.train.checkpoint import load_state, resolve_resume, save_checkpoint
from arborl.train.config import TrainConfig
from arborl.train.evaluate import evaluate_policy
from arborl.train.runlog import MetricsLogger, RunDir
from arborl.train.sft import lr_lambda, warm_start
from arborl.train.update import critic_update, critic_values, ppo_update, score_rows

log = logging.getLogger("arborl")


class TrainingAborted(RuntimeError):
    """Too many non-finite updates in a row of the run (see trainer.max_bad_steps)."""


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A seed for (run seed, step, purpose) that does not collide across steps."""
    return int(np.random.default_rng([seed, step, salt]).integers(0, 2**31 - 1))


def batch_rewards(
    batch, num_trajectories: int, sources: dict[str, float], trajectories=None
) -> tuple[torch.Tensor, dict[str, float]]:
    """(R,) combined reward of each step row and the per-source `reward/*` metrics
    (summed over the batch, per trajectory). Shared by the local and the Ray trainer."""
    fields = {
        "env_reward": batch.tensors["step_reward"].numpy(),
        "valid_action": batch.meta["valid_action"].astype(float),
        "format_ok": batch.meta["format_ok"].astype(float),
        "is_last": batch.meta["done"].astype(float),
        "won": batch.tensors["won"].numpy() & batch.meta["done"].astype(bool),
        "potential": batch.meta["potential"].astype(float),
        "next_potential": batch.meta["next_potential"].astype(float),
        "terminated": batch.meta["terminated"].astype(float),
    }
    if "rm" in sources and trajectories is not None:  # a reward model reads whole episodes
        fields.update(rm_fields(batch, trajectories))
    total, comps = combine_rewards(fields, sources)
    rewards = torch.as_tensor(total, dtype=torch.float32)
    metrics = {f"reward/{k}": float(v.sum() / max(1, num_trajectories)) for k, v in comps.items()}
    return rewards, metrics


def attach_advantages(batch, rewards: torch.Tensor, algo, values: torch.Tensor | None):
    """Write `adv`, `weight` (and `returns`, `old_values` for ppo) into `batch`; return the
    rows to train on (zero-advantage rows dropped if `algo.drop_zero_adv`) and stats.
    Shared by the local and the Ray trainer."""
    adv, returns, metrics = compute_advantages(batch, rewards, algo, values)
    metrics = dict(metrics)
    batch["adv"] = adv
    lengths = episode_lengths(batch)
    w = 1.0 / lengths if algo.episode_weighting else torch.ones(len(batch))
    batch["weight"] = w / w.mean()
    if returns is not None:
        batch["returns"], batch["old_values"] = returns, values
    train = batch[adv.abs() > 1e-8] if algo.drop_zero_adv else batch
    metrics["train/rows_with_signal"] = float(len(train)) / max(1, len(batch))
    return train, metrics


class RLTrainer:
    def __new__(cls, cfg: TrainConfig):
        # trainer.backend=ray: the same loop (`_fit`) with the model work on Ray workers.
        if cls is RLTrainer and cfg.trainer.backend == "ray":
            from arborl.distributed.controller import RayTrainer

            cls = RayTrainer
        return super().__new__(cls)

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        if cfg.trainer.num_threads:
            torch.set_num_threads(cfg.trainer.num_threads)
        self.run = RunDir.create(cfg.trainer.output_dir, cfg.trainer.name, cfg)
        configure_rm_source(cfg.reward)  # loads reward.rm_model when `rm` is a source
        self.model, self.tokenizer = load_policy(
            cfg.model.name_or_path, dtype=cfg.model.dtype, seed=cfg.model.seed
        )
        if cfg.model.lora_rank:
            self.model = apply_lora(self.model, r=cfg.model.lora_rank, alpha=cfg.model.lora_alpha)
        self.backend = HFBackend(self.model, self.tokenizer, max_batch_size=128)
        a = cfg.algo
        self.critic = self.critic_opt = None
        # algo.name "ppo" is GAE over a critic ("gae" in the estimator registry).
        if algos.needs_critic("gae" if a.name == "ppo" else a.name):
            self.critic = ValueModel.from_policy_spec(
                cfg.model.name_or_path, seed=cfg.model.seed + 1
            )
            self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=a.critic_lr)
        self.ref = None
        if a.kl_coef > 0:  # a frozen copy (LoRA included), re-synced after the warm start
            self.ref = copy.deepcopy(self.model).requires_grad_(False)
        self.kl_ctl = (
            algos.make_kl_controller("adaptive", a.kl_coef, a.kl_target)
            if a.kl_target is not None
            else algos.make_kl_controller("fixed", a.kl_coef)
        )
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lr_lambda(a.warmup_steps, cfg.trainer.total_steps, a.lr_schedule)
        )
        self.gen = torch.Generator().manual_seed(cfg.trainer.seed)
        n_envs = cfg.rollout.num_tasks * cfg.rollout.group_size
        mode = None if cfg.env.pool_mode == "auto" else cfg.env.pool_mode
        self.pool = make_pool(cfg.env.id, n_envs, mode, split=cfg.env.train_split, **cfg.env.kwargs)
        self.task_seeds = (  # a task file replaces random seeds (checked here, before work)
            read_task_seeds(cfg.env.tasks_file, cfg.env.id, cfg.env.train_split)
            if cfg.env.tasks_file
            else None
        )
        self.step = 0
        self.env_steps = 0
        self.bad_steps = 0
        self.history: dict[str, list] = {"train": [], "eval": []}

    # --- phases -------------------------------------------------------------------------
    def warm_start(self, logger: MetricsLogger) -> dict[str, float]:
        return warm_start(self.model, self.tokenizer, self.cfg, logger)

    def _step_metrics(self, s: dict, t_roll: float, t1: float, lr: float) -> dict[str, float]:
        """The per-step metrics both backends log (`s`: the rollout's episode stats)."""
        return {
            "train/success": s["success_rate"],
            "train/mean_return": s["mean_return"],
            "train/mean_turns": s["mean_turns"],
            "train/invalid_rate": s["invalid_action_rate"],
            "train/env_steps": float(self.env_steps),
            "time/rollout_s": t_roll,
            "time/update_s": time.perf_counter() - t1,
            "actor/lr": lr,
            "actor/kl_coef": self.kl_ctl.value,
            # tree rollouts (rollout.mode=tree) report no generation throughput
            **({"rollout/tokens_per_s": s["tokens_per_s"]} if "tokens_per_s" in s else {}),
        }

    def sync_reference(self) -> None:
        """After the warm start: KL is measured against the policy RL starts from."""
        if self.ref is not None:
            self.ref.load_state_dict(self.model.state_dict())

    def evaluate(self, num_episodes: int | None = None) -> dict[str, float]:
        c = self.cfg
        self.model.eval()
        return evaluate_policy(
            self.backend,
            self.tokenizer,
            c.env.id,
            c.env.kwargs,
            c.agent,
            c.rollout,
            c.eval,
            num_episodes=num_episodes,
            split=c.env.eval_split,
        )

    def rl_step(self) -> dict[str, float]:
        """One rollout batch and its update; returns the step's metrics."""
        c, a = self.cfg, self.cfg.algo
        t0 = time.perf_counter()
        task_seed = step_seed(c.trainer.seed, self.step, 1)
        if self.task_seeds is None:
            seeds = draw_seeds(c.rollout.num_tasks, task_seed)
        else:
            seeds = sample_task_seeds(self.task_seeds, c.rollout.num_tasks, task_seed)
        rcfg = replace(c.rollout, seed=step_seed(c.trainer.seed, self.step, 2))
        self.model.eval()
        rollout_fn = run_rollout
        if c.rollout.mode == "tree":  # search trees as rollouts: arborl.search.training
            from arborl.search.training import tree_rollout as rollout_fn
        res = rollout_fn(
            self.backend, self.tokenizer, self.pool, seeds, rcfg, c.agent, split=c.env.train_split
        )
        batch = res.batch
        t_roll = time.perf_counter() - t0
        self.env_steps += len(batch)
        rewards, metrics = batch_rewards(
            batch, len(res.trajectories), c.reward.sources, res.trajectories
        )
        mtok = a.micro_batch_tokens
        if self.ref is not None:
            batch["ref_logp"] = score_rows(self.ref, batch, rcfg.temperature, mtok)
        values = None
        if self.critic is not None:
            with torch.no_grad():
                values = critic_values(self.critic, batch, mtok)
        train, adv_metrics = attach_advantages(batch, rewards, a, values)
        metrics.update(adv_metrics)
        t1 = time.perf_counter()
        if len(train):
            self.model.train()
            up = ppo_update(
                self.model, self.opt, train, a, rcfg.temperature, self.gen, self.kl_ctl.value
            )
            metrics.update(up.stats)
            self._count_bad(up.skipped)
            if self.critic is not None:
                cup = critic_update(self.critic, self.critic_opt, batch, a, self.gen)
                metrics.update(cup.stats)
                self._count_bad(cup.skipped)
        with warnings.catch_warnings():
            # The schedule counts RL steps; a step whose rows all had zero advantage took
            # no optimizer step, which torch warns about. That is expected here.
            warnings.simplefilter("ignore", UserWarning)
            self.sched.step()
        if "actor/kl" in metrics:
            self.kl_ctl.update(metrics["actor/kl"], len(batch))
        metrics.update(self._step_metrics(res.stats, t_roll, t1, self.sched.get_last_lr()[0]))
        if c.trainer.save_trajectories:
            write_trajectories(
                self.run.path / "trajectories" / f"step-{self.step:05d}.jsonl",
                res.trajectories[: c.trainer.save_trajectories],
            )
        return metrics

    def _count_bad(self, skipped: int) -> None:
        if skipped:
            self.bad_steps += skipped
            log.warning(
                "step %d: %d update(s) skipped for non-finite loss/grad", self.step, skipped
            )
            if self.bad_steps >= self.cfg.trainer.max_bad_steps:
                raise TrainingAborted(
                    f"{self.bad_steps} updates had a NaN/inf loss or gradient "
                    f"(trainer.max_bad_steps={self.cfg.trainer.max_bad_steps}); lower algo.lr "
                    "or check the rewards"
                )

    # --- checkpoints --------------------------------------------------------------------
    def save(self) -> Path:
        state = {
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "generator": self.gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "backend_generator": self.backend._generator.get_state(),
            "env_steps": self.env_steps,
            "bad_steps": self.bad_steps,
            "kl_coef": self.kl_ctl.value,
            "history": self.history,
        }
        if self.critic_opt is not None:
            state["critic_optimizer"] = self.critic_opt.state_dict()
        if self.ref is not None:  # after a warm start it is not the spec's initial weights
            state["reference"] = self.ref.state_dict()
        return save_checkpoint(
            self.run.path,
            self.step,
            self.model,
            self.tokenizer,
            state,
            critic=self.critic,
            keep=self.cfg.trainer.keep_checkpoints,
            extra_files={"arborl_agent.json": json.dumps(to_dict(self.cfg.agent), default=str)},
        )

    def load(self, ckpt: Path) -> None:
        from safetensors.torch import load_file

        weights = load_file(ckpt / "policy" / "model.safetensors")
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        if unexpected or [k for k in missing if "lm_head" not in k]:
            raise RuntimeError(
                f"checkpoint {ckpt} does not match the model: {missing} {unexpected}"
            )
        if self.model.config.tie_word_embeddings:
            self.model.tie_weights()
        st = load_state(ckpt)
        self.opt.load_state_dict(st["optimizer"])
        self.sched.load_state_dict(st["scheduler"])
        self.gen.set_state(st["generator"])
        if self.ref is not None and "reference" in st:
            self.ref.load_state_dict(st["reference"])
        torch.set_rng_state(st["torch_rng"])
        self.backend._generator.set_state(st["backend_generator"])
        self.step, self.env_steps, self.bad_steps = st["step"], st["env_steps"], st["bad_steps"]
        self.kl_ctl.value = st["kl_coef"]
        self.history = st["history"]
        if self.critic is not None:
            critic = ValueModel.from_pretrained(ckpt / "critic")
            self.critic.load_state_dict(critic.state_dict())
            self.critic_opt.load_state_dict(st["critic_optimizer"])

    # --- the run ------------------------------------------------------------------------
    def fit(self) -> dict:
        c = self.cfg
        logger = MetricsLogger(
            self.run,
            total=c.trainer.total_steps,
            desc="RL",
            keys=("train/success", "eval/success", "actor/pg_loss"),
            disable_bar=not c.trainer.progress,
        )
        try:
            return self._fit(logger)
        finally:
            logger.close()
            self.pool.close()
            self.run.close()

    def _fit(self, logger: MetricsLogger) -> dict:
        c = self.cfg
        t_start = time.perf_counter()
        ckpt = resolve_resume(c.trainer.resume, self.run.path)
        if ckpt is not None:
            self.load(ckpt)
            log.info("resumed from %s at step %d", ckpt, self.step)
            logger.bar.update(self.step)
        else:
            if c.sft.enabled and c.sft.steps > 0:
                self.warm_start(logger)
                self.sync_reference()
            before = self.evaluate()
            self.history["before"] = before
            log.info(
                "before RL: success %.3f [%.3f, %.3f]",
                before["success"],
                before["success_lo"],
                before["success_hi"],
            )
            logger.log(0, {f"eval/{k}": v for k, v in before.items()})
            self.history["eval"].append((0, before["success"]))
        while self.step < c.trainer.total_steps:
            if c.trainer.max_env_steps and self.env_steps >= c.trainer.max_env_steps:
                break
            metrics = self.rl_step()
            self.step += 1
            self.history["train"].append((self.step, metrics["train/success"]))
            if c.eval.every and self.step % c.eval.every == 0 and self.step < c.trainer.total_steps:
                ev = self.evaluate(c.eval.every_episodes)
                metrics.update({f"eval/{k}": v for k, v in ev.items()})
                self.history["eval"].append((self.step, ev["success"]))
            logger.log(self.step, metrics, advance=1)
            if c.trainer.save_every and self.step % c.trainer.save_every == 0:
                self.save()
        self.save()
        after = self.evaluate()
        self.history["after"] = after
        self.history["eval"].append((self.step, after["success"]))
        logger.log(self.step, {f"eval/final_{k}": v for k, v in after.items()})
        summary = {
            "before": self.history.get("before"),
            "after": after,
            "steps": self.step,
            "env_steps": self.env_steps,
            "wall_s": round(time.perf_counter() - t_start, 1),
            "run_dir": str(self.run.path),
        }
        (self.run.path / "summary.json").write_text(json.dumps(summary, indent=2))
        if c.trainer.plots:
            from arborl.train.plots import plot_learning_curves

            plot_learning_curves(self.run.path, self.history)
        return summary
