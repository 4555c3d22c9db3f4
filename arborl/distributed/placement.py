"""Where the workers run: Ray start-up, one placement group, and actor creation.

One placement group holds a bundle per process: split placement gives the train ranks
bundles 0..N-1 and the rollout workers the next M; colocated placement gives each train
rank one bundle and runs its rollout in the same process. The group is created with the
PACK strategy, so a single machine works and a cluster fills node by node. Joining an
existing cluster (`ray.address`) ships the `arborl` package itself to the workers
as a `py_modules` runtime env (a few MB of source, not a copy of the virtualenv): every
node needs the same Python dependencies installed, nothing copied by hand.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
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


@dataclass
class Placement:
    """The placement group and how to start an actor in a given bundle."""

    cfg: TrainConfig
    group: Any

    @classmethod
    def create(cls, cfg: TrainConfig, timeout_s: float = 120.0) -> Placement:
        import ray
        from ray.util.placement_group import placement_group

        check_resources(cfg)
        t = cfg.ray
        bundle = {"CPU": t.cpus_per_worker}
        if t.gpus_per_rank:
            bundle["GPU"] = t.gpus_per_rank
        pg = placement_group([dict(bundle) for _ in range(_num_bundles(cfg))], strategy="PACK")
        ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
        if not ready:
            raise RuntimeError(
                f"the placement group of {_num_bundles(cfg)} bundles {bundle} was not ready "
                f"after {timeout_s:.0f} s; check `ray status` for free resources"
            )
        return cls(cfg, pg)

    def _options(self, bundle: int) -> dict:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        t = self.cfg.ray
        return {
            "num_cpus": t.cpus_per_worker,
            "num_gpus": t.gpus_per_rank,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=bundle
            ),
        }

    def train_rank(self, rank: int, policy_path: str | None):
        import ray

        t = self.cfg.ray
        role = ColocatedRole if t.placement == "colocated" else TrainRole
        actor = ray.remote(role).options(**self._options(rank))
        return actor.remote(self.cfg, rank, t.num_train_ranks, policy_path)

    def rollout_worker(self, index: int, policy_path: str | None):
        import ray

        bundle = self.cfg.ray.num_train_ranks + index
        actor = ray.remote(RolloutRole).options(**self._options(bundle))
        return actor.remote(self.cfg, index, policy_path)

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(self.group)
