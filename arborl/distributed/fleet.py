"""The rollout side as the controller sees it: a worker group that survives dead workers.

Every call to the rollout workers goes through `RolloutFleet.gather`, which waits for each
worker's part on its own. When a worker's process has died (killed, out of memory) or its
part's result was lost, the fleet starts a replacement in the same placement-group bundle,
pushes it the latest weights (the controller keeps the ObjectRef of the last full-state
gather, never the tensors) and re-runs that worker's part of the call. When the worker's
whole node is gone, its bundle may fit nowhere else (`ray.rollout_resources` pins it to
nodes like the lost one), so the replacement goes to a live node in a bundle of its own
(`Placement.rollout_worker(node_lost=True)`). A rollout share is a pure function of
(seeds, sampling seed, weights), and a part's result is used only once the whole part has
come back, so the re-run gives exactly the episodes the dead worker would have: none
twice, none half. After `ray.max_worker_restarts` replacements the error propagates.
Where every worker runs (node id, IP, pid) goes to the run log when it starts.
"""

from __future__ import annotations

import logging
import time
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
        self.nodes: list[str | None] = [None] * len(group)

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
        from ray.exceptions import ObjectLostError, RayActorError

        results = []
        for i, ref in enumerate(pending.refs):
            while True:
                try:
                    results.append(ray.get(ref))
                    break
                # RayActorError covers ActorDiedError and ActorUnavailableError; a result
                # stored on a lost node is an ObjectLostError.
                except (RayActorError, ObjectLostError) as err:
                    self._replace(i, err, pending.name)
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

    def locate(self) -> list[dict]:
        """Where each worker runs ({node_id, ip, pid}), logged and kept for `_replace`."""
        where = self.call("where")
        for i, w in enumerate(where):
            self.nodes[i] = w["node_id"]
            log.info("ray placement: %s", describe(f"rollout worker {i}", w))
        return where

    def _node_lost(self, index: int, wait_s: float = 0.0) -> bool:
        """Whether Ray has declared worker `index`'s node dead (polling up to `wait_s`)."""
        import ray

        node, deadline = self.nodes[index], time.monotonic() + wait_s
        while node is not None:
            if node not in {n["NodeID"] for n in ray.nodes() if n["Alive"]}:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
        return False

    def _replace(self, index: int, err: Exception, call: str) -> None:
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
            "rollout worker %d was lost during %r (%s); starting a replacement (%d/%d) and "
            "re-running its part", index, call, type(err).__name__, self.restarts,
            self.max_restarts,
        )  # fmt: skip
        try:
            ray.kill(self.group.handles[index], no_restart=True)
        except Exception as kill_err:  # already gone: nothing to clean up
            log.debug("ray.kill of dead worker %d: %s", index, kill_err)
        handle, where = self._start_replacement(index)
        self.group.handles[index] = handle
        self.nodes[index] = where["node_id"]
        log.info("ray placement: %s (replacement)", describe(f"rollout worker {index}", where))

    def _start_replacement(self, index: int) -> tuple[Any, dict]:
        """A new worker `index` holding the latest weights, and where it runs.

        A worker lost with its node fails (ActorUnavailableError) before Ray declares the
        node dead (after `health_check_failure_threshold` missed health checks), so a
        replacement started in the old bundle can die with that node; by then the node is
        known lost and the second replacement goes to a live node."""
        from ray.exceptions import RayActorError

        lost = self._node_lost(index)
        try:
            return self._start_worker(index, lost)
        except RayActorError:
            if lost or not self._node_lost(index, wait_s=30.0):
                raise
            return self._start_worker(index, node_lost=True)

    def _start_worker(self, index: int, node_lost: bool) -> tuple[Any, dict]:
        import ray

        if node_lost:
            log.warning(
                "rollout worker %d's node %s is lost: its replacement goes to a live node",
                index, self.nodes[index],
            )  # fmt: skip
        handle = self.placement.rollout_worker(index, self.policy_path, node_lost=node_lost)
        if self.weights_ref is not None:
            ray.get(handle.set_weights.remote(self.weights_ref, self.version))
        return handle, ray.get(handle.where.remote())

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


def describe(name: str, where: dict) -> str:
    """`name on node <id> (ip <ip>, pid <pid>)`: the run log's placement lines."""
    return f"{name} on node {where['node_id']} (ip {where['ip']}, pid {where['pid']})"
