"""`RayEngine` (`trainer.engine=ray`): the engine of the one RL loop
(`arborl.train.rl.RLTrainer`) as a single controller over Ray workers.

The driver process holds no model weights. The trainer keeps its loop (seeds, rewards,
advantages, the minibatch order, KL control, checkpoints); this engine only dispatches
the model work:

  rollout      tasks split across rollout workers, Batches merged (`merge.py`)
  ref / values `dp_split` over the train ranks
  update       `dp_minibatches`: every rank gets its chunk of each minibatch
  weight sync  full-state gather on the train group -> one ObjectRef -> every rollout
               worker (split placement), or an all-gather into each rank's own rollout
               model (colocated); the version number is checked before every rollout

With `ray.one_step_off`, the rollout of step k+1 is launched with the pre-update
weights before update k starts, so generation and training overlap; the batch trained at
step k+1 is then one policy version old (`async/staleness`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arborl.agent.settings import agent_settings_text
from arborl.config import ConfigError
from arborl.data import Batch
from arborl.distributed.dispatch import WorkerGroup
from arborl.distributed.fleet import RolloutFleet, describe
from arborl.distributed.placement import Placement, env_specs, init_ray
from arborl.distributed.workers import ColocatedRole, RolloutRole, TrainRole
from arborl.rollout import draw_seeds
from arborl.rollout.merge import merge_rollouts
from arborl.train.config import TrainConfig
from arborl.train.engine import (
    SCORE_KEYS,
    RolloutOutput,
    RolloutPlan,
    check_no_engine_options,
    choice_keys,
)
from arborl.train.evaluate import EvalResult, summarize_eval
from arborl.train.rollout_modes import ROLLOUT_MODES, get_rollout_mode
from arborl.train.update import UpdateResult

log = logging.getLogger("arborl")


def check_ray_config(cfg: TrainConfig) -> None:
    """Reject Ray-mode settings that cannot work, naming the field and the fix."""
    check_no_engine_options(cfg)
    t = cfg.ray
    if t.placement == "colocated" and t.num_rollout_workers != t.num_train_ranks:
        raise ConfigError(
            f"ray.placement=colocated runs rollout in the train ranks, so "
            f"ray.num_rollout_workers={t.num_rollout_workers} must equal "
            f"ray.num_train_ranks={t.num_train_ranks}; set them equal or use placement=split"
        )
    if t.one_step_off and cfg.algo.max_gen_batches > 1:
        raise ConfigError(
            f"algo.max_gen_batches={cfg.algo.max_gen_batches} draws extra rollouts within a "
            "step, but ray.one_step_off=true has the next step's rollout in flight (an extra "
            "draw would take it): set algo.max_gen_batches=1 or ray.one_step_off=false"
        )
    if t.placement == "colocated" and t.one_step_off:
        raise ConfigError(
            "ray.one_step_off=true overlaps rollout and training in different processes; "
            "it needs ray.placement=split"
        )
    if t.placement == "colocated" and t.rollout_resources:
        raise ConfigError(
            "ray.placement=colocated runs rollout in the train ranks, which ray.train_resources "
            "places; ray.rollout_resources must stay empty (or use placement=split)"
        )
    if cfg.teacher.enabled:
        raise ConfigError(
            f"teacher.kind={cfg.teacher.kind}: learning from a teacher runs with "
            "trainer.engine=local so far (the rollout workers do not label states yet); set "
            "trainer.engine=local"
        )
    if not get_rollout_mode(cfg.rollout.mode).distributed:  # the record says where it runs
        able = [n for n in ROLLOUT_MODES.names() if get_rollout_mode(n).distributed]
        raise ConfigError(
            f"trainer.engine=ray runs the rollout modes {able}; rollout.mode="
            f"{cfg.rollout.mode!r} runs with trainer.engine=local"
        )
    if cfg.rollout.view != "step":
        raise ConfigError(
            f"trainer.engine=ray trains the step view; rollout.view={cfg.rollout.view!r} "
            "is not supported there (use rollout.view=step)"
        )
    for key in ("train_resources", "rollout_resources"):
        for name, amount in getattr(t, key).items():
            if name in ("CPU", "GPU", "memory", "object_store_memory") or amount <= 0:
                raise ConfigError(
                    f"ray.{key}.{name}={amount}: custom resources are positive amounts of "
                    "names given to `ray start --resources`; CPUs and GPUs are set by "
                    "ray.cpus_per_worker and ray.gpus_per_rank"
                )
    if t.num_rollout_workers > cfg.rollout.num_tasks:
        raise ConfigError(
            f"ray.num_rollout_workers={t.num_rollout_workers} exceeds rollout.num_tasks="
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
    independent streams drawn from (base, worker, salt) rather than base + w, so no
    worker's seed is another's plus a small count (`LMPolicy._params` offsets its seed by
    its call count)."""
    if worker == 0:
        return base
    return int(np.random.default_rng([base, worker, *salt]).integers(0, 2**31 - 1))


def _sft_task(cfg: TrainConfig, out_dir: str, env_specs: dict) -> dict:
    """The local warm start, in a worker process; the policy goes to `out_dir`."""
    from arborl.envs.registry import adopt
    from arborl.models.loading import save_policy
    from arborl.train.build import build_policy, set_threads
    from arborl.train.sft import warm_start

    set_threads(cfg)
    adopt(env_specs)
    model, tokenizer = build_policy(cfg, None)
    stats = warm_start(model, tokenizer, cfg)
    save_policy(model, tokenizer, out_dir)
    return stats


class RayEngine:
    """Model work on Ray: rollout workers (a fleet that replaces dead ones) and an FSDP2
    train group of `ray.num_train_ranks` ranks; the driver holds no weights."""

    name = "ray"
    check_config = staticmethod(check_ray_config)

    @classmethod
    def sampler_mismatch(cls, cfg: TrainConfig) -> str | None:
        """`ray.one_step_off` rolls out with weights one version behind the trainer's
        (`algo.correction.mode=auto`); lockstep workers hold the trainer's weights."""
        if cfg.ray.one_step_off:
            return "ray.one_step_off samples with weights one version behind the trainer's"
        return None

    def __init__(self, cfg: TrainConfig, run_dir: Path) -> None:
        # `check_config` (check_ray_config) already ran in RLTrainer, before the run dir.
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.version = -1
        self.fleet: RolloutFleet | None = None
        self.train_group: WorkerGroup | None = None
        self.placement: Placement | None = None
        self._pending = None
        self._behaviour = 0
        self._started_ray = False

    # --- start and stop ---------------------------------------------------------------
    def prepare(self, warm_start: bool) -> dict[str, float] | None:
        """Start Ray; with `warm_start`, SFT in a Ray task first (the workers then load its
        policy, which is also the KL reference); build the groups and sync weights."""
        import ray

        c, t = self.cfg, self.cfg.ray
        self._started_ray = init_ray(c)
        stats, policy_path = None, None
        if warm_start:
            out = str((self.run_dir / "sft_policy").resolve())
            task = ray.remote(_sft_task).options(num_cpus=t.cpus_per_worker)
            stats = ray.get(task.remote(c, out, env_specs(c)))
            policy_path = out
        self.policy_path = policy_path
        self.placement = Placement.create(c)
        role = ColocatedRole if t.placement == "colocated" else TrainRole
        ranks = [self.placement.train_rank(r, policy_path) for r in range(t.num_train_ranks)]
        self.train_group = WorkerGroup(role, ranks)
        addr, port = self.train_group.call("rendezvous_address")
        self.train_info = self.train_group.call("setup", addr, port)
        if t.placement == "colocated":
            self.fleet = RolloutFleet(WorkerGroup(role, ranks))
        else:
            handles = [
                self.placement.rollout_worker(w, policy_path) for w in range(t.num_rollout_workers)
            ]
            self.fleet = RolloutFleet(
                WorkerGroup(RolloutRole, handles), self.placement, policy_path,
                t.max_worker_restarts,
            )  # fmt: skip
        for rank, where in enumerate(self.train_group.call("where")):
            log.info("ray placement: %s", describe(f"train rank {rank}", where))
        self.fleet.locate()
        self._push_weights()
        return stats

    def close(self) -> None:
        import ray

        if self.fleet is not None:
            self.fleet.close()
        if self.train_group is not None:
            for h in self.train_group.handles:
                ray.kill(h, no_restart=True)
        if self.placement is not None:
            self.placement.remove()
        if self._started_ray:
            ray.shutdown()

    # --- the model work ---------------------------------------------------------------
    def rollout(self, plan: RolloutPlan, upcoming: RolloutPlan | None = None) -> RolloutOutput:
        pending = self._pending or self._launch(plan)
        call, t0 = pending
        # A replacement worker holds the newest weights: re-run its share with those.
        results = self.fleet.gather(call, retry_args=lambda args: (args[0], self.fleet.version))
        ahead = upcoming is not None and self.cfg.ray.one_step_off
        self._pending = self._launch(upcoming) if ahead else None
        batch, trajectories, stats = merge_rollouts(results, time.perf_counter() - t0)
        self._behaviour = min(r["version"] for r in results if r is not None)
        return RolloutOutput(batch, trajectories, stats)

    def _launch(self, plan: RolloutPlan):
        """Start `plan`'s rollout on the fleet with the weights it holds now."""
        base = plan.rollout.seed
        parts = [
            {"seeds": s, "group_offset": off, "seed": worker_seed(base, w, plan.step)}
            for w, (off, s) in enumerate(shares(plan.seeds, len(self.fleet)))
        ]
        return self.fleet.launch("rollout", parts, self.version), time.perf_counter()

    def reference_logp(self, batch: Batch, temperature: float) -> torch.Tensor:
        keys = SCORE_KEYS + choice_keys(batch)  # scored choices: their candidates too
        ref = self.train_group.call("ref_logp", batch.select(*keys), temperature)
        return ref.tensors["ref_logp"]

    def policy_logp(self, batch: Batch, temperature: float) -> torch.Tensor:
        keys = SCORE_KEYS + choice_keys(batch)
        out = self.train_group.call("policy_logp", batch.select(*keys), temperature)
        return out.tensors["policy_logp"]

    def values(self, batch: Batch) -> torch.Tensor:
        return self.train_group.call("values", batch.select(*SCORE_KEYS)).tensors["values"]

    def update(self, actor_minibatches, critic_minibatches, temperature, kl_coef) -> UpdateResult:
        stats, skipped = self.train_group.call(
            "update_actor", actor_minibatches, actor_minibatches[0][:1], temperature, kl_coef
        )
        if critic_minibatches:
            cstats, cskipped = self.train_group.call(
                "update_critic", critic_minibatches, critic_minibatches[0][:1]
            )
            stats, skipped = {**stats, **cstats}, skipped + cskipped
        return UpdateResult(stats, skipped)

    def scheduler_step(self) -> float:
        return self.train_group.call("sched_step")

    def sync_weights(self) -> dict[str, float]:
        self._push_weights()
        return {
            "async/staleness": float(self.version - 1 - self._behaviour),
            "ray/worker_restarts": float(self.fleet.restarts),
        }

    def _push_weights(self) -> None:
        """New policy weights to every rollout worker, as version `self.version + 1`."""
        import ray

        self.version += 1
        if self.cfg.ray.placement == "colocated":
            self.train_group.call("sync_local", self.version)
            self.fleet.version = self.version
            return
        refs, _ = self.train_group.call_async("full_state")
        ray.wait(refs, num_returns=len(refs))  # a collective: every rank must finish
        self.fleet.push_weights(refs[0], self.version)

    def evaluate(self, num_episodes: int | None = None) -> EvalResult:
        c = self.cfg
        seeds = draw_seeds(num_episodes or c.eval.num_episodes, c.eval.seed)
        parts = [
            {"seeds": s, "seed": worker_seed(c.eval.seed, w, 3)}
            for w, (_, s) in enumerate(shares(seeds, len(self.fleet)))
        ]
        results = self.fleet.call("evaluate", parts, self.version)
        return summarize_eval(results, c.eval.save_episodes)

    # --- checkpoints ------------------------------------------------------------------
    def save(self, directory: Path) -> dict[str, Any]:
        """Sharded train state (`sharded/`) and the full policy as HF (`policy/`)."""
        self.train_group.call("save", str(directory))
        agent = {"arborl_agent.json": agent_settings_text(self.cfg.agent)}
        self.train_group.call("export_policy", str(directory / "policy"), agent)
        return {}

    def load(self, directory: Path, state: dict[str, Any]) -> None:
        self.train_group.call("load", str(Path(directory).resolve()))
