"""The two worker roles of Ray mode, as plain classes that `placement` turns into actors.

`TrainRole` is one rank of the train group: it builds the actor, the critic and the
reference with the same builder as the local engine (`arborl.train.build`), shards them
with FSDP2, and runs the update core of `arborl.train.update` with the FSDP2
communication object (`arborl.distributed.comm.FSDP`). `RolloutRole` holds an unsharded copy
of the policy behind a generation backend and its own env pool, and rolls out a share of
the tasks. Weights only ever move train -> rollout, tagged with a version number that the
rollout side checks before it samples, so a stale worker fails loudly instead of
silently training on old-policy data. `ColocatedRole` is both in one process.

Every method carries `@register(...)`: how `WorkerGroup.call` splits its arguments.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from arborl.data import Batch
from arborl.distributed import sharding
from arborl.distributed.comm import FSDP
from arborl.distributed.dispatch import register
from arborl.envs.registry import adopt
from arborl.generation.hf import HFBackend
from arborl.train import build
from arborl.train.config import TrainConfig
from arborl.train.evaluate import evaluate_share
from arborl.train.memory import resolve_micro_batch_tokens
from arborl.train.rollout_modes import rollout_step
from arborl.train.update import actor_update, critic_fit, critic_values, score_rows


def node_info() -> dict[str, Any]:
    """Where the calling Ray worker runs: node id, node IP and process id."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    return {"node_id": node_id, "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}


class TrainRole:
    """One rank of the FSDP2 train group (actor + critic + reference)."""

    def __init__(
        self, cfg: TrainConfig, rank: int, world_size: int, policy_path: str | None,
        env_specs: dict | None = None,
    ):  # fmt: skip
        build.set_threads(cfg)
        adopt(env_specs or {})
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.policy_path = policy_path
        self.device = sharding.pick_device(cfg.ray.gpus_per_rank)
        self.model = self.critic = self.ref = None
        self.algo = cfg.algo  # its micro-batch budget resolved in `setup`

    @register("one_to_all", "all")
    def where(self) -> dict[str, Any]:
        return node_info()

    @register("one_to_all", "rank_zero")
    def rendezvous_address(self) -> tuple[str, int]:
        """(IP of this node, a free port): rank 0's answer is the group's TCP rendezvous."""
        import ray

        return ray.util.get_node_ip_address(), sharding.free_port()

    @register("one_to_all", "all")
    def setup(self, addr: str, port: int) -> dict[str, Any]:
        """Join the process group, build and shard the models, make the optimizers."""
        c = self.cfg
        backend = sharding.init_process_group(self.rank, self.world_size, addr, port, self.device)
        mesh = sharding.device_mesh(self.world_size, self.device)
        mp = sharding.mixed_precision(self.device, build.model_dtype(c))

        def shard(module):
            return sharding.shard_model(module.to(self.device), mesh, mp)

        model, self.tokenizer = build.build_policy(c, self.policy_path)
        self.algo = replace(c.algo, micro_batch_tokens=self._micro_batch_tokens(model))
        # As the local engine: the reference is the policy RL starts from (after SFT).
        ref = build.build_reference(c, model)
        self.model = shard(model)
        self.opt, self.sched = build.build_optimizer(c, self.model)
        critic = build.build_critic(c)
        self.critic = shard(critic) if critic is not None else None
        self.critic_opt = build.build_critic_optimizer(c, self.critic)
        self.ref = shard(ref) if ref is not None else None
        return {"rank": self.rank, "backend": backend, "device": str(self.device)}

    @register("dp_split", "dp_concat")
    def ref_logp(self, shard: Batch, temperature: float) -> Batch:
        with torch.no_grad(), FSDP.gathered(self.ref):
            logp = score_rows(self.ref, shard.to(self.device), temperature, self._mtok)
        return Batch({"ref_logp": logp.cpu()})

    @register("dp_split", "dp_concat")
    def policy_logp(self, shard: Batch, temperature: float) -> Batch:
        """The policy's log-probs of `shard`'s responses before the update (a rollout
        correction's old_logp, `arborl.train.correction`)."""
        with torch.no_grad(), FSDP.gathered(self.model):
            logp = score_rows(self.model, shard.to(self.device), temperature, self._mtok)
        return Batch({"policy_logp": logp.cpu()})

    @register("dp_split", "dp_concat")
    def values(self, shard: Batch) -> Batch:
        with torch.no_grad(), FSDP.gathered(self.critic):
            values = critic_values(self.critic, shard.to(self.device), self._mtok)
        return Batch({"values": values})

    def _micro_batch_tokens(self, model: torch.nn.Module) -> int:
        """The update's micro-batch token budget (`arborl.train.memory`), the smallest of the
        ranks' so all agree: CPU ranks split the host's free memory (all may share one
        machine), a GPU rank has its device's; measured on the unsharded model."""
        share = self.world_size if self.device.type == "cpu" else 1
        ctx = build.compute_dtype(self.cfg, model)
        requested = self.cfg.algo.micro_batch_tokens
        tokens = resolve_micro_batch_tokens(model, requested, share, ctx, device=self.device)
        agreed = torch.tensor([tokens], device=self.device)
        torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MIN)
        return int(agreed.item())

    @property
    def _mtok(self) -> int:
        return self.algo.micro_batch_tokens

    @register("dp_minibatches", "rank_zero")
    def update_actor(self, shards, template: Batch, temperature: float, kl_coef: float):
        """PPO steps over this rank's minibatch chunks; (stats, skipped), equal on all ranks."""
        self.model.train()
        shards = [s.to(self.device) if s is not None else None for s in shards]
        up = actor_update(
            self.model, self.opt, shards, template.to(self.device), self.algo,
            temperature, kl_coef, comm=FSDP,
        )  # fmt: skip
        self.model.eval()
        return up.stats, up.skipped

    @register("dp_minibatches", "rank_zero")
    def update_critic(self, shards, template: Batch):
        shards = [s.to(self.device) if s is not None else None for s in shards]
        up = critic_fit(
            self.critic,
            self.critic_opt,
            shards,
            template.to(self.device),
            self.algo,
            comm=FSDP,
        )
        return up.stats, up.skipped

    @register("one_to_all", "rank_zero")
    def sched_step(self) -> float:
        return build.scheduler_step(self.sched)

    @register("one_to_all", "rank_zero")
    def full_state(self) -> dict | None:
        """The policy's full weights as numpy, on rank 0 (None elsewhere); a collective."""
        state = sharding.gather_full_state(self.model)
        return sharding.state_to_numpy(state) if self.rank == 0 else None

    @register("one_to_all", "all")
    def memory_bytes(self) -> dict[str, int]:
        """This rank's bytes of actor parameters, gradients and AdamW states."""
        grads = sum(
            (p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).numel()
            * p.grad.element_size()
            for p in self.model.parameters()
            if p.grad is not None
        )
        optim = 0
        for st in self.opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor) and v.dim() > 0:
                    local = v.to_local() if hasattr(v, "to_local") else v
                    optim += local.numel() * local.element_size()
        return {"params": sharding.local_param_bytes(self.model), "grads": grads, "optim": optim}

    @register("one_to_all", "all")
    def save(self, directory: str) -> None:
        from arborl.distributed.checkpoint import save_sharded

        save_sharded(self, Path(directory))

    @register("one_to_all", "all")
    def load(self, directory: str) -> None:
        from arborl.distributed.checkpoint import load_sharded

        load_sharded(self, Path(directory))

    @register("one_to_all", "all")
    def export_policy(self, directory: str, extra_files: dict[str, str]) -> str | None:
        """Gather the policy and write it as a plain HF directory (rank 0 writes)."""
        from arborl.distributed.checkpoint import export_hf

        state = sharding.gather_full_state(self.model)
        if self.rank != 0:
            return None
        return str(export_hf(self.cfg, self.policy_path, state, Path(directory), extra_files))


class RolloutRole:
    """A generation backend over an unsharded policy copy, plus a pool for its share."""

    def __init__(
        self, cfg: TrainConfig, index: int, policy_path: str | None,
        env_specs: dict | None = None,
    ):  # fmt: skip
        build.set_threads(cfg)
        adopt(env_specs or {})
        self.cfg, self.index = cfg, index
        device = sharding.pick_device(cfg.ray.gpus_per_rank)
        model, self.tokenizer = build.build_policy(cfg, policy_path)
        model.eval()
        self.backend = HFBackend(model, self.tokenizer, device=str(device), max_batch_size=128)
        self.version = -1
        self.pools = build.build_pool_set(cfg)  # this worker's envs, until `close_pools`

    @register("one_to_all", "all")
    def pid(self) -> int:
        return os.getpid()

    @register("one_to_all", "all")
    def where(self) -> dict[str, Any]:
        return node_info()

    @register("one_to_all", "all")
    def set_weights(self, state: dict, version: int) -> int:
        """Load a full numpy state pushed through the object store; returns the version.
        The version already loaded is a no-op: a replacement worker got it at its start
        before the push it replaces is re-run."""
        if version == self.version:
            return version
        if version < self.version:
            raise RuntimeError(
                f"rollout worker {self.index}: weights version {version} is older than "
                f"the loaded {self.version}; the controller pushed updates out of order"
            )
        sharding.load_numpy_state(self.backend.model, state)
        self.version = version
        return version

    @register("one_to_all", "all")
    def weights_version(self) -> int:
        return self.version

    def _check_version(self, expected: int) -> None:
        if self.version != expected:
            raise RuntimeError(
                f"rollout worker {self.index} holds weights version {self.version}, the "
                f"controller asked for {expected}: weight sync was missed or reordered"
            )

    def _pool(self, num_envs: int):
        """This worker's env pool, in `env.pool_mode` (as the local trainer builds it)."""
        return build.build_train_pool(self.cfg, num_envs, pools=self.pools)

    @register("one_to_all", "all")
    def close_pools(self) -> int:
        """Close the env pools and their worker processes or actors; returns how many
        pools there were (later calls build new ones)."""
        num_pools = len(self.pools.pools)
        self.pools.close()
        self.pools = build.build_pool_set(self.cfg)
        return num_pools

    @register("per_worker", "all")
    def rollout(self, share: dict | None, expected_version: int) -> dict | None:
        """Roll out `share` = {seeds, group_offset, seed} with weights `expected_version`."""
        if not share or not share["seeds"]:
            return None
        self._check_version(expected_version)
        c, t0 = self.cfg, time.perf_counter()
        rcfg = replace(c.rollout, num_tasks=len(share["seeds"]), seed=share["seed"])
        pool = self._pool(len(share["seeds"]) * rcfg.group_size)
        with build.compute_dtype(c, self.backend.model):
            res = rollout_step(
                self.backend, self.tokenizer, pool, seeds=share["seeds"], rollout_cfg=rcfg, cfg=c,
                split=c.env.train_split,
            )  # fmt: skip
        res.batch.meta["group_id"] = res.batch.meta["group_id"].astype(int) + share["group_offset"]
        return {
            "batch": res.batch,
            "trajectories": res.trajectories,
            "episodes": res.episodes,
            "version": self.version,
            "wall_s": time.perf_counter() - t0,
            "worker": self.index,
        }

    @register("per_worker", "all")
    def evaluate(self, share: dict | None, expected_version: int) -> dict | None:
        """Held-out episodes of `share` = {seeds, seed}: `evaluate_share`'s counts."""
        if not share or not share["seeds"]:
            return None
        self._check_version(expected_version)
        with build.compute_dtype(self.cfg, self.backend.model):
            return evaluate_share(
                self.backend, self.tokenizer, self.cfg, share["seeds"], share["seed"], self.pools
            )


class ColocatedRole(TrainRole, RolloutRole):
    """Train rank and rollout worker in one process: weights sync by a collective gather."""

    def __init__(
        self, cfg: TrainConfig, rank: int, world_size: int, policy_path: str | None,
        env_specs: dict | None = None,
    ):  # fmt: skip
        TrainRole.__init__(self, cfg, rank, world_size, policy_path, env_specs)
        RolloutRole.__init__(self, cfg, rank, policy_path, env_specs)

    @register("one_to_all", "all")
    def sync_local(self, version: int) -> int:
        """Every rank gathers the full policy and loads it into its own rollout model."""
        state = sharding.gather_full_state(self.model, to_all=True)
        sharding.load_numpy_state(self.backend.model, sharding.state_to_numpy(state))
        self.version = version
        return version
