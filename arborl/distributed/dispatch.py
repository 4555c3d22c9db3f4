"""Worker groups whose methods declare how a `Batch` is split across ranks and gathered.

The single controller never loops over actors by hand: a worker method carries
`@register(dispatch=..., collect=...)` (verl's `@register(dispatch_mode=...)`, reduced to
what arborl needs), and `WorkerGroup.call(name, ...)` looks the modes up, splits the
arguments into one call per worker, launches them all, and gathers the results.

Dispatch modes (how one call becomes N):
  one_to_all      the same arguments to every worker (setup, checkpoints, weight gathers)
  dp_split        the first argument is a Batch: padded to a multiple of N, cut into N equal
                  consecutive chunks, chunk r to worker r (scoring: ref logprobs, values)
  dp_minibatches  the first argument is a list of minibatch Batches: worker r gets chunk r of
                  every minibatch (None where a minibatch has fewer rows than N), and
                  `info['num_seqs'] / info['num_tokens']` of the whole minibatch, so that the
                  per-rank losses sum to the 1-process loss (PPO and critic updates)
  per_worker      the first argument is a list with one entry per worker (rollout shares)
Collect modes (how N results become one):
  all        the list of results; rank_zero  the first worker's result (the ranks agree
  after an all-reduce); dp_concat  concatenate Batch chunks and drop the dispatch padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from arborl.data import Batch
from arborl.registry import Registry

DispatchFn = Callable[[int, tuple, dict], tuple[list[tuple[tuple, dict]], Any]]
CollectFn = Callable[[list, Any], Any]


def _one_to_all(n: int, args: tuple, kwargs: dict):
    return [(args, kwargs)] * n, None


def _dp_split(n: int, args: tuple, kwargs: dict):
    batch, rest = _first_batch(args, "dp_split")
    padded, pad = batch.pad_to_multiple(n)
    return [((chunk, *rest), kwargs) for chunk in padded.chunk(n)], pad


def _dp_minibatches(n: int, args: tuple, kwargs: dict):
    minibatches, rest = args[0], args[1:]
    per_rank: list[list[Batch | None]] = [[] for _ in range(n)]
    for mb in minibatches:
        if not isinstance(mb, Batch) or not len(mb):
            raise TypeError("dp_minibatches needs a list of non-empty Batches as first argument")
        info = {"num_seqs": float(len(mb)), "num_tokens": _num_tokens(mb)}
        chunks = mb.chunk(n)
        for r in range(n):
            part = chunks[r] if r < len(chunks) else None
            if part is not None:
                part.info.update(info)
            per_rank[r].append(part)
    return [((per_rank[r], *rest), kwargs) for r in range(n)], None


def _per_worker(n: int, args: tuple, kwargs: dict):
    shares, rest = args[0], args[1:]
    if len(shares) != n:
        raise ValueError(f"per_worker dispatch got {len(shares)} shares for {n} workers")
    return [((share, *rest), kwargs) for share in shares], None


def _num_tokens(mb: Batch) -> float:
    if "response_mask" in mb.tensors:
        return float(mb.tensors["response_mask"].sum())
    return float(mb.tensors["loss_mask"].sum()) if "loss_mask" in mb.tensors else 0.0


def _first_batch(args: tuple, mode: str) -> tuple[Batch, tuple]:
    if not args or not isinstance(args[0], Batch):
        raise TypeError(f"{mode} dispatch needs a Batch as the first argument")
    return args[0], args[1:]


def _collect_all(results: list, ctx: Any) -> list:
    return results


def _collect_rank_zero(results: list, ctx: Any) -> Any:
    return results[0]


def _collect_dp_concat(results: list, pad: int) -> Batch:
    return Batch.concat(results).unpad(pad or 0)


DISPATCH_MODES: Registry[DispatchFn] = Registry("dispatch")
"""Dispatch mode -> `fn(num_workers, args, kwargs) -> ([(args, kwargs)] per worker, ctx)`."""
DISPATCH_MODES.register("one_to_all", _one_to_all)
DISPATCH_MODES.register("dp_split", _dp_split)
DISPATCH_MODES.register("dp_minibatches", _dp_minibatches)
DISPATCH_MODES.register("per_worker", _per_worker)
COLLECT_MODES: Registry[CollectFn] = Registry("collect")
"""Collect mode -> `fn(results, ctx) -> result` (`ctx`: what the dispatch returned)."""
COLLECT_MODES.register("all", _collect_all)
COLLECT_MODES.register("rank_zero", _collect_rank_zero)
COLLECT_MODES.register("dp_concat", _collect_dp_concat)
MODES_ATTR = "_arborl_modes"


def register(dispatch: str = "one_to_all", collect: str = "all") -> Callable:
    """Declare how `WorkerGroup.call` splits this method's arguments and gathers results."""
    DISPATCH_MODES.get(dispatch)  # an unknown mode fails here, at class definition
    COLLECT_MODES.get(collect)

    def mark(fn: Callable) -> Callable:
        setattr(fn, MODES_ATTR, (dispatch, collect))
        return fn

    return mark


def method_modes(cls: type, name: str) -> tuple[str, str]:
    """The (dispatch, collect) modes a worker class declared for method `name`."""
    fn = getattr(cls, name, None)
    if fn is None:
        public = sorted(m for m in dir(cls) if hasattr(getattr(cls, m), MODES_ATTR))
        raise AttributeError(f"{cls.__name__} has no method {name!r}; registered: {public}")
    if not hasattr(fn, MODES_ATTR):
        raise AttributeError(
            f"{cls.__name__}.{name} has no @register(dispatch=..., collect=...) declaration"
        )
    return getattr(fn, MODES_ATTR)


class WorkerGroup:
    """N Ray actor handles of one worker class, called through declared modes.

    `call` blocks and returns the collected result; `call_async` returns the pending
    ObjectRefs and the dispatch context, for `collect` later (overlap, one-step-off)."""

    def __init__(self, cls: type, handles: Sequence[Any]) -> None:
        self.cls = cls
        self.handles = list(handles)

    def __len__(self) -> int:
        return len(self.handles)

    def split(self, name: str, *args: Any, **kwargs: Any) -> tuple[list[tuple[tuple, dict]], Any]:
        """The per-worker (args, kwargs) of a call, and the context its collect needs."""
        dispatch, _ = method_modes(self.cls, name)
        return DISPATCH_MODES.get(dispatch)(len(self.handles), args, kwargs)

    def submit(self, index: int, name: str, args: tuple, kwargs: dict):
        """Launch one worker's part of a call; returns its ObjectRef."""
        return getattr(self.handles[index], name).remote(*args, **kwargs)

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> tuple[list, Any]:
        calls, ctx = self.split(name, *args, **kwargs)
        return [self.submit(i, name, a, kw) for i, (a, kw) in enumerate(calls)], ctx

    def collect(self, name: str, refs: list, ctx: Any) -> Any:
        import ray

        _, collect = method_modes(self.cls, name)
        return COLLECT_MODES.get(collect)(ray.get(refs), ctx)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        refs, ctx = self.call_async(name, *args, **kwargs)
        return self.collect(name, refs, ctx)
