"""The rollout side as the controller sees it: a worker group that survives dead workers.

Every call to the rollout workers goes through `RolloutFleet.gather`, which waits for each
worker's part on its own. When a worker's process has died (killed, out of memory, node
lost), the fleet starts a replacement in the same placement-group bundle, pushes it the
latest weights (the controller keeps the ObjectRef of the last full-state gather, never
the tensors) and re-runs that worker's part of the call. A rollout share is a pure
function of (seeds, sampling seed, weights), so the re-run gives the episodes the dead
worker would have. After `ray.max_worker_restarts` replacements the error propagates.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from arborl.distributed.dispatch import WorkerGroup

log = logging.getLogger("arborl")


@dataclass
class PendingCall:
    """A launched call: its name, the per-worker arguments, refs and collect context."""

    name: str
    calls: list[tuple[tuple, dict]]
    refs: list
    ctx: Any


class RolloutFleet:
    """Rollout workers + restart. `placement=None` (colocated) disables restarts."""

    def __init__(self, group: WorkerGroup, placement=None, policy_path=None, max_restarts=0):
        self.group = group
        self.placement = placement
        self.policy_path = policy_path
        self.max_restarts = max_restarts
        self.restarts = 0
        self.weights_ref = None
        self.version = -1

    def __len__(self) -> int:
        return len(self.group)

    def launch(self, name: str, *args: Any, **kwargs: Any) -> PendingCall:
        calls, ctx = self.group.split(name, *args, **kwargs)
        refs = [self.group.submit(i, name, a, kw) for i, (a, kw) in enumerate(calls)]
        return PendingCall(name, calls, refs, ctx)

    def gather(self, pending: PendingCall, retry_args=None) -> Any:
        """Collected results of `pending`; a dead worker is replaced and its part re-run
        (with `retry_args(args)` applied to its arguments first, when given)."""
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        results = []
        for i, ref in enumerate(pending.refs):
            while True:
                try:
                    results.append(ray.get(ref))
                    break
                except (ActorDiedError, ActorUnavailableError, RayActorError) as err:
                    self._replace(i, err)
                    args, kwargs = pending.calls[i]
                    args = retry_args(args) if retry_args else args
                    ref = self.group.submit(i, pending.name, args, kwargs)
        from arborl.distributed.dispatch import COLLECT_MODES, method_modes

        _, collect = method_modes(self.group.cls, pending.name)
        return COLLECT_MODES[collect](results, pending.ctx)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.gather(self.launch(name, *args, **kwargs))

    def push_weights(self, weights_ref, version: int) -> None:
        """Load the full state behind `weights_ref` on every worker as `version`."""
        self.weights_ref, self.version = weights_ref, version
        self.call("set_weights", weights_ref, version)

    def _replace(self, index: int, err: Exception) -> None:
        import ray

        if self.placement is None:
            raise RuntimeError(
                f"rollout worker {index} died ({type(err).__name__}); with "
                "ray.placement=colocated it is also a train rank, whose process group "
                "cannot be repaired: resume the run (trainer.resume=auto) instead"
            ) from err
        if self.restarts >= self.max_restarts:
            raise RuntimeError(
                f"rollout worker {index} died and ray.max_worker_restarts="
                f"{self.max_restarts} replacements are used up"
            ) from err
        self.restarts += 1
        log.warning(
            "rollout worker %d died (%s); starting a replacement (%d/%d)",
            index, type(err).__name__, self.restarts, self.max_restarts,
        )  # fmt: skip
        try:
            ray.kill(self.group.handles[index], no_restart=True)
        except Exception as kill_err:  # already gone: nothing to clean up
            log.debug("ray.kill of dead worker %d: %s", index, kill_err)
        handle = self.placement.rollout_worker(index, self.policy_path)
        if self.weights_ref is not None:
            ray.get(handle.set_weights.remote(self.weights_ref, self.version))
        self.group.handles[index] = handle

    def close(self) -> None:
        """Close every worker's env pools (out-of-process envs included), then the actors."""
        import ray

        refs = [h.close_pools.remote() for h in self.group.handles]
        try:
            ray.get(refs, timeout=60)
        except Exception as err:  # a dead worker's pools died with it
            log.warning("closing rollout env pools: %s", err)
        for h in self.group.handles:
            try:
                ray.kill(h, no_restart=True)
            except Exception as err:  # an actor that already died
                log.debug("ray.kill on close: %s", err)
