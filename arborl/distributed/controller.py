"""`RayTrainer`: the local trainer loop, driven as a single controller over Ray workers.

The driver process holds no model weights. It runs `RLTrainer._fit` unchanged (warm
start, evaluations, steps, checkpoints, summary) and the same reward, advantage and
minibatch code as local mode (`batch_rewards`, `attach_advantages`, the minibatch order
from `self.gen`); only the model work is dispatched:

  rollout      tasks split across rollout workers, Batches merged (`merge.py`)
  ref / values `dp_split` over the train ranks
  update       `dp_minibatches`: every rank gets its chunk of each minibatch
  weight sync  full-state gather on the train group -> one ObjectRef -> every rollout
               worker (split placement), or an all-gather into each rank's own rollout
               model (colocated); the version number is checked before every rollout

With `trainer.one_step_off`, the rollout of step k+1 is launched with the pre-update
weights before update k starts, so generation and training overlap; the batch trained at
step k+1 is then one policy version old (`async/staleness`).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from arborl.config import ConfigError, to_dict
from arborl.data import write_trajectories
from arborl.distributed.dispatch import WorkerGroup
from arborl.distributed.fleet import RolloutFleet
from arborl.distributed.merge import merge_rollouts
from arborl.distributed.placement import Placement, init_ray
from arborl.distributed.workers import ColocatedRole, RolloutRole, TrainRole, needs_critic
from arborl.rollout import draw_seeds
from arborl.rollout.metrics import wilson_interval
from arborl.train.checkpoint import STATE_FILE, checkpoint_dirs, load_state, resolve_resume
from arborl.train.config import TrainConfig
from arborl.train.rl import RLTrainer, attach_advantages, batch_rewards, step_seed

log = logging.getLogger("arborl")

ACTOR_KEYS = ("input_ids", "attention_mask", "response_mask", "old_logp", "adv", "weight")
CRITIC_KEYS = ("input_ids", "attention_mask", "response_mask", "returns", "old_values")
SCORE_KEYS = ("input_ids", "attention_mask", "response_mask")


def check_ray_config(cfg: TrainConfig) -> None:
    """Reject Ray-mode settings that cannot work, naming the field and the fix."""
    t = cfg.trainer
    if t.placement == "colocated" and t.num_rollout_workers != t.num_train_ranks:
        raise ConfigError(
            f"trainer.placement=colocated runs rollout in the train ranks, so "
            f"trainer.num_rollout_workers={t.num_rollout_workers} must equal "
            f"trainer.num_train_ranks={t.num_train_ranks}; set them equal or use placement=split"
        )
    if t.placement == "colocated" and t.one_step_off:
        raise ConfigError(
            "trainer.one_step_off=true overlaps rollout and training in different processes; "
            "it needs trainer.placement=split"
        )
    if getattr(cfg.rollout, "mode", "flat") != "flat":
        raise ConfigError(
            f"trainer.backend=ray rolls out flat episodes; rollout.mode={cfg.rollout.mode!r} "
            "(search trees) runs with trainer.backend=local"
        )
    if cfg.rollout.view != "step":
        raise ConfigError(
            f"trainer.backend=ray trains the step view; rollout.view={cfg.rollout.view!r} "
            "is not supported there (use rollout.view=step)"
        )
    if t.num_rollout_workers > cfg.rollout.num_tasks:
        raise ConfigError(
            f"trainer.num_rollout_workers={t.num_rollout_workers} exceeds rollout.num_tasks="
            f"{cfg.rollout.num_tasks}: a worker would get no task; use at most that many"
        )


def shares(seeds: list[int], num_workers: int) -> list[tuple[int, list[int]]]:
    """Consecutive (offset, seeds) parts, the first `len % n` one task larger."""
    size, extra = divmod(len(seeds), num_workers)
    out, start = [], 0
    for w in range(num_workers):
        stop = start + size + (1 if w < extra else 0)
        out.append((start, seeds[start:stop]))
        start = stop
    return out


def worker_seed(base: int, worker: int, *salt: int) -> int:
    """Worker 0 keeps the local trainer's seed (1 worker = local sampling); others get
    independent streams, not base + w (LMPolicy adds its call count to the seed)."""
    if worker == 0:
        return base
    return int(np.random.default_rng([base, worker, *salt]).integers(0, 2**31 - 1))


def _sft_task(cfg: TrainConfig, out_dir: str) -> dict:
    """The local warm start, in a worker process; the policy goes to `out_dir`."""
    from arborl.distributed.workers import _threads, build_policy
    from arborl.models.loading import save_policy
    from arborl.train.sft import warm_start

    _threads(cfg)
    model, tokenizer = build_policy(cfg, None)
    stats = warm_start(model, tokenizer, cfg)
    save_policy(model, tokenizer, out_dir)
    return stats


class RayTrainer(RLTrainer):
    """`RLTrainer` whose model work runs on Ray workers (trainer.backend=ray)."""

    def __init__(self, cfg: TrainConfig) -> None:
        check_ray_config(cfg)
        self.cfg = cfg
        from arborl.train.runlog import RunDir

        self.run = RunDir.create(cfg.trainer.output_dir, cfg.trainer.name, cfg)
        a = cfg.algo
        from arborl import algos

        self.kl_ctl = (
            algos.make_kl_controller("adaptive", a.kl_coef, a.kl_target)
            if a.kl_target is not None
            else algos.make_kl_controller("fixed", a.kl_coef)
        )
        from arborl.data.tasks import read_task_seeds
        from arborl.rewards import configure_rm_source

        configure_rm_source(cfg.reward)  # a reward model scores episodes on the driver
        self.task_seeds = (  # as local mode: a task file replaces random seeds
            read_task_seeds(cfg.env.tasks_file, cfg.env.id, cfg.env.train_split)
            if cfg.env.tasks_file
            else None
        )
        self.gen = torch.Generator().manual_seed(cfg.trainer.seed)
        self.step = self.env_steps = self.bad_steps = 0
        self.history: dict[str, list] = {"train": [], "eval": []}
        self.version = -1
        self.pool = None  # the rollout fleet (RLTrainer.fit closes `pool`)
        self.train_group = self.placement = None
        self._sft_stats: dict | None = None
        self._pending = None
        self._started_ray = False
        self.callbacks: list = []
        """Called as fn(trainer) after every RL step (tests use it to kill a worker)."""

    # --- start and stop ---------------------------------------------------------------
    def fit(self) -> dict:
        self._start()
        try:
            return super().fit()
        finally:
            self._stop()

    def _start(self) -> None:
        import ray

        c, t = self.cfg, self.cfg.trainer
        self._started_ray = init_ray(c)
        policy_path = None
        if resolve_resume(t.resume, self.run.path) is None and c.sft.enabled and c.sft.steps > 0:
            out = str((self.run.path / "sft_policy").resolve())
            task = ray.remote(_sft_task).options(num_cpus=t.ray_cpus_per_worker)
            self._sft_stats = ray.get(task.remote(c, out))
            policy_path = out
        self.policy_path = policy_path
        self.placement = Placement.create(c)
        role = ColocatedRole if t.placement == "colocated" else TrainRole
        ranks = [self.placement.train_rank(r, policy_path) for r in range(t.num_train_ranks)]
        self.train_group = WorkerGroup(role, ranks)
        addr, port = self.train_group.call("rendezvous_address")
        self.train_info = self.train_group.call("setup", addr, port)
        if t.placement == "colocated":
            self.pool = RolloutFleet(WorkerGroup(role, ranks))
        else:
            handles = [
                self.placement.rollout_worker(w, policy_path) for w in range(t.num_rollout_workers)
            ]
            self.pool = RolloutFleet(
                WorkerGroup(RolloutRole, handles), self.placement, policy_path,
                t.max_worker_restarts,
            )  # fmt: skip
        self._sync_weights()

    def _stop(self) -> None:
        import ray

        if self.train_group is not None:
            for h in self.train_group.handles:
                ray.kill(h, no_restart=True)
        if self.placement is not None:
            self.placement.remove()
        if self._started_ray:
            ray.shutdown()

    # --- phases used by RLTrainer._fit ------------------------------------------------
    def sync_reference(self) -> None:
        """Nothing to do: the train ranks build the reference from the SFT policy itself."""

    def warm_start(self, logger) -> dict[str, float]:
        """The SFT already ran in `_start` (the workers load its policy); log it as local."""
        stats = self._sft_stats or {}
        log_stats = {k: v for k, v in stats.items() if k != "sft/demos"}
        logger.log(0, {"phase": "sft", **log_stats})
        return stats

    def evaluate(self, num_episodes: int | None = None) -> dict[str, float]:
        c = self.cfg
        n = num_episodes or c.eval.num_episodes
        seeds = draw_seeds(n, c.eval.seed)
        parts = [
            {"seeds": s, "seed": worker_seed(c.eval.seed, w, 3)}
            for w, (_, s) in enumerate(shares(seeds, len(self.pool)))
        ]
        results = [r for r in self.pool.call("evaluate", parts, self.version) if r]
        wins = sum(r["wins"] for r in results)
        lo, hi = wilson_interval(wins, n)
        out = {"success": wins / n, "success_lo": lo, "success_hi": hi, "episodes": float(n)}
        for k in ("mean_return", "mean_turns", "invalid_action_rate"):
            if all(k in r for r in results):
                out[k] = sum(r[k] for r in results) / n
        return out

    def _launch_rollout(self, step: int):
        c = self.cfg
        task_seed = step_seed(c.trainer.seed, step, 1)
        if self.task_seeds is None:
            seeds = draw_seeds(c.rollout.num_tasks, task_seed)
        else:
            from arborl.data.tasks import sample_task_seeds

            seeds = sample_task_seeds(self.task_seeds, c.rollout.num_tasks, task_seed)
        base = step_seed(c.trainer.seed, step, 2)
        parts = [
            {"seeds": s, "group_offset": off, "seed": worker_seed(base, w, step)}
            for w, (off, s) in enumerate(shares(seeds, len(self.pool)))
        ]
        return self.pool.launch("rollout", parts, self.version), time.perf_counter()

    def _gather_rollout(self, pending):
        call, t0 = pending
        # A replacement worker holds the newest weights: re-run its share with those.
        results = self.pool.gather(call, retry_args=lambda args: (args[0], self.pool.version))
        return results, time.perf_counter() - t0

    def rl_step(self) -> dict[str, float]:
        c, a, t = self.cfg, self.cfg.algo, self.cfg.trainer
        t0 = time.perf_counter()
        pending = self._pending or self._launch_rollout(self.step)
        results, wall = self._gather_rollout(pending)
        self._pending = None
        if t.one_step_off and self.step + 1 < t.total_steps:
            self._pending = self._launch_rollout(self.step + 1)  # pre-update weights
        batch, trajectories, stats = merge_rollouts(results, wall)
        behaviour = min(r["version"] for r in results if r is not None)
        t_roll = time.perf_counter() - t0
        self.env_steps += len(batch)
        rewards, metrics = batch_rewards(batch, len(trajectories), c.reward.sources, trajectories)
        temperature = c.rollout.temperature
        if a.kl_coef > 0:
            ref = self.train_group.call("ref_logp", batch.select(*SCORE_KEYS), temperature)
            batch["ref_logp"] = ref.tensors["ref_logp"]
        values = None
        if needs_critic(c):
            values = self.train_group.call("values", batch.select(*SCORE_KEYS)).tensors["values"]
        train, adv_metrics = attach_advantages(batch, rewards, a, values)
        metrics.update(adv_metrics)
        t1 = time.perf_counter()
        if len(train):
            metrics.update(self._update(train, batch, temperature))
        lr = self.train_group.call("sched_step")
        if "actor/kl" in metrics:
            self.kl_ctl.update(metrics["actor/kl"], len(batch))
        t_sync = time.perf_counter()
        self._sync_weights()
        metrics.update(self._step_metrics(stats, t_roll, t1, lr))
        metrics["time/weight_sync_s"] = time.perf_counter() - t_sync
        metrics["async/staleness"] = float(self.version - 1 - behaviour)
        metrics["ray/worker_restarts"] = float(self.pool.restarts)
        if t.save_trajectories:
            write_trajectories(
                self.run.path / "trajectories" / f"step-{self.step:05d}.jsonl",
                trajectories[: t.save_trajectories],
            )
        for fn in self.callbacks:
            fn(self)
        return metrics

    def _update(self, train, batch, temperature: float) -> dict[str, float]:
        c = self.cfg
        keys = ACTOR_KEYS + (("ref_logp",) if "ref_logp" in train else ())
        mbs = self._minibatches(train.select(*keys))
        stats, skipped = self.train_group.call(
            "update_actor", mbs, mbs[0][:1], temperature, self.kl_ctl.value
        )
        self._count_bad(skipped)
        if needs_critic(c):
            cmbs = self._minibatches(batch.select(*CRITIC_KEYS))
            cstats, cskipped = self.train_group.call("update_critic", cmbs, cmbs[0][:1])
            stats = {**stats, **cstats}
            self._count_bad(cskipped)
        return stats

    def _minibatches(self, batch):
        """The local `ppo_update` order: per epoch one permutation from `self.gen`."""
        out = []
        for _ in range(self.cfg.algo.ppo_epochs):
            perm = torch.randperm(len(batch), generator=self.gen)
            out.extend(batch.reorder(perm).split(self.cfg.algo.minibatch_size))
        return out

    def _sync_weights(self) -> None:
        """New policy weights to every rollout worker, as version `self.version + 1`."""
        import ray

        self.version += 1
        if self.cfg.trainer.placement == "colocated":
            self.train_group.call("sync_local", self.version)
            self.pool.version = self.version
            return
        refs, _ = self.train_group.call_async("full_state")
        ray.wait(refs, num_returns=len(refs))  # a collective: every rank must finish
        self.pool.push_weights(refs[0], self.version)

    # --- checkpoints ------------------------------------------------------------------
    def save(self) -> Path:
        c = self.cfg
        root = self.run.path.resolve() / "checkpoints"
        final, tmp = root / f"step-{self.step}", root / f".tmp-step-{self.step}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.train_group.call("save", str(tmp))
        agent = json.dumps(to_dict(c.agent), default=str)
        self.train_group.call("export_policy", str(tmp / "policy"), {"arborl_agent.json": agent})
        state = {
            "step": self.step,
            "backend": "ray",
            "generator": self.gen.get_state(),
            "env_steps": self.env_steps,
            "bad_steps": self.bad_steps,
            "kl_coef": self.kl_ctl.value,
            "history": self.history,
        }
        torch.save(state, tmp / STATE_FILE)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in checkpoint_dirs(self.run.path)[: -c.trainer.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load(self, ckpt: Path) -> None:
        st = load_state(ckpt)
        if st.get("backend") != "ray":
            raise RuntimeError(
                f"{ckpt} was written by trainer.backend=local; resume it with that backend, or "
                f"start Ray mode from its policy: model.name_or_path={ckpt}/policy sft.enabled=false"
            )
        self.train_group.call("load", str(Path(ckpt).resolve()))
        self.gen.set_state(st["generator"])
        self.step, self.env_steps, self.bad_steps = st["step"], st["env_steps"], st["bad_steps"]
        self.kl_ctl.value = st["kl_coef"]
        self.history = st["history"]
        self._sync_weights()
