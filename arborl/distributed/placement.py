"""Where the workers run: Ray start-up, one placement group, and actor creation.

One placement group holds a bundle per process: split placement gives the train ranks
bundles 0..N-1 and the rollout workers the next M; colocated placement gives each train
rank one bundle and runs its rollout in the same process. The group is created with the
PACK strategy, so a single machine works and a cluster fills node by node; custom
resources in the bundles (`ray.train_resources`, `ray.rollout_resources`) pin a role to
the nodes started with them. A rollout worker whose node is lost gets a one-bundle group
of its own on a live node (`rollout_worker(node_lost=True)`). Joining an
existing cluster (`ray.address`) ships the `arborl` package itself to the workers
as a `py_modules` runtime env (a few MB of source, not a copy of the virtualenv): every
node needs the same Python dependencies installed, nothing copied by hand.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arborl.distributed.workers import ColocatedRole, RolloutRole, TrainRole
from arborl.envs.remote.ray_pool import init_local_ray
from arborl.train.config import TrainConfig

log = logging.getLogger("arborl")


def init_ray(cfg: TrainConfig) -> bool:
    """Connect to `ray.address` or start a private local instance; returns
    whether this call started Ray (and so should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    t = cfg.ray
    if t.address:
        import arborl

        package = str(Path(arborl.__file__).resolve().parent)
        ray.init(address=t.address, runtime_env={"py_modules": [package]})
        return True
    init_local_ray(num_cpus=max(1, int(_cpus_needed(cfg) + 0.999)))
    return True


def _num_bundles(cfg: TrainConfig) -> int:
    t = cfg.ray
    return t.num_train_ranks + (0 if t.placement == "colocated" else t.num_rollout_workers)


def _cpus_needed(cfg: TrainConfig) -> float:
    return _num_bundles(cfg) * cfg.ray.cpus_per_worker


def _bundle(cfg: TrainConfig, role: str) -> dict[str, float]:
    """One process's bundle: CPUs, GPUs and the role's custom resources (`role` is "train"
    or "rollout": `ray.train_resources` / `ray.rollout_resources`)."""
    t = cfg.ray
    bundle = {"CPU": t.cpus_per_worker}
    if t.gpus_per_rank:
        bundle["GPU"] = t.gpus_per_rank
    return {**bundle, **getattr(t, f"{role}_resources")}


def _bundles(cfg: TrainConfig) -> list[dict[str, float]]:
    """Train ranks' bundles first (0..N-1), then the rollout workers' (split placement)."""
    t = cfg.ray
    train = [_bundle(cfg, "train") for _ in range(t.num_train_ranks)]
    if t.placement == "colocated":
        return train
    return train + [_bundle(cfg, "rollout") for _ in range(t.num_rollout_workers)]


def check_resources(cfg: TrainConfig) -> None:
    """Fail before creating anything when the cluster cannot hold the placement group."""
    import ray

    t = cfg.ray
    have = ray.cluster_resources()
    need_cpu = _cpus_needed(cfg)
    need_gpu = _num_bundles(cfg) * t.gpus_per_rank
    if have.get("CPU", 0) + 1e-9 < need_cpu:
        raise RuntimeError(
            f"the Ray cluster has {have.get('CPU', 0)} CPUs, the placement needs {need_cpu} "
            f"({_num_bundles(cfg)} processes x ray.cpus_per_worker="
            f"{t.cpus_per_worker}); lower ray.cpus_per_worker or add nodes"
        )
    if have.get("GPU", 0) + 1e-9 < need_gpu:
        raise RuntimeError(
            f"the Ray cluster has {have.get('GPU', 0)} GPUs, the placement needs {need_gpu}; "
            "set ray.gpus_per_rank=0 for CPU training"
        )
    for role in ("train", "rollout"):
        for name, amount in getattr(t, f"{role}_resources").items():
            need = sum(b.get(name, 0.0) for b in _bundles(cfg))
            if have.get(name, 0) + 1e-9 < need:
                raise RuntimeError(
                    f"ray.{role}_resources asks for {need:g} of the custom resource "
                    f"{name!r} in all ({amount:g} per process), the Ray cluster has "
                    f"{have.get(name, 0):g}: start a node with `ray start --resources "
                    f"'{{\"{name}\": 1}}'` or drop the key"
                )


def env_specs(cfg: TrainConfig) -> dict:
    """The run's env specs as this process registered them, for its Ray actors: an env a
    script registered at run time (not a built-in, not an entry point) is unknown there."""
    from arborl.envs.registry import specs_of

    return specs_of([cfg.env.id])


@dataclass
class Placement:
    """The placement group and how to start an actor in a given bundle; one-bundle spare
    groups for rollout workers whose node was lost."""

    cfg: TrainConfig
    group: Any
    spares: list = field(default_factory=list)

    @classmethod
    def create(cls, cfg: TrainConfig, timeout_s: float = 120.0) -> Placement:
        from ray.util.placement_group import placement_group

        check_resources(cfg)
        bundles = _bundles(cfg)
        pg = placement_group(bundles, strategy="PACK")
        _wait_ready(pg, timeout_s, f"the placement group of {len(bundles)} bundles {bundles}")
        return cls(cfg, pg)

    def _options(self, bundle: int, group: Any = None) -> dict:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        t = self.cfg.ray
        return {
            "num_cpus": t.cpus_per_worker,
            "num_gpus": t.gpus_per_rank,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=group or self.group, placement_group_bundle_index=bundle
            ),
        }

    def train_rank(self, rank: int, policy_path: str | None):
        import ray

        t = self.cfg.ray
        role = ColocatedRole if t.placement == "colocated" else TrainRole
        actor = ray.remote(role).options(**self._options(rank))
        return actor.remote(self.cfg, rank, t.num_train_ranks, policy_path, env_specs(self.cfg))

    def rollout_worker(self, index: int, policy_path: str | None, node_lost: bool = False):
        """Rollout worker `index` in its bundle; with `node_lost` (its bundle's node is
        gone, and Ray cannot re-place a bundle that pins resources no live node has), in a
        new one-bundle group on a live node instead."""
        import ray

        if node_lost:
            options = self._options(0, self._spare_group(index))
        else:
            options = self._options(self.cfg.ray.num_train_ranks + index)
        actor = ray.remote(RolloutRole).options(**options)
        return actor.remote(self.cfg, index, policy_path, env_specs(self.cfg))

    def _spare_group(self, index: int, timeout_s: float = 120.0) -> Any:
        """A one-bundle group for worker `index`: `ray.rollout_resources` kept when a live
        node still has them all, else dropped (with a warning) so any live node will do."""
        import ray
        from ray.util.placement_group import placement_group

        bundle = _bundle(self.cfg, "rollout")
        custom = self.cfg.ray.rollout_resources
        live = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        if custom and not any(all(r.get(k, 0) >= v for k, v in custom.items()) for r in live):
            log.warning(
                "no live node has ray.rollout_resources=%s: rollout worker %d goes to any "
                "live node with free CPUs", custom, index,
            )  # fmt: skip
            bundle = {k: v for k, v in bundle.items() if k not in custom}
        group = placement_group([bundle], strategy="PACK")
        _wait_ready(
            group, timeout_s,
            f"rollout worker {index} was lost with its node, and a replacement bundle {bundle}",
            fix="add a node, or stop the run and resume it later (trainer.resume=auto)",
        )  # fmt: skip
        self.spares.append(group)
        return group

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for group in [self.group, *self.spares]:
            remove_placement_group(group)


def _wait_ready(group: Any, timeout_s: float, what: str, fix: str = "") -> None:
    import ray

    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        raise RuntimeError(
            f"{what} was not placed after {timeout_s:.0f} s; "
            + (fix or "check `ray status` for free resources")
        )
