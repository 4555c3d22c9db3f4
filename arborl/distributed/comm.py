"""The `Comm` of the update core (`arborl.train.update`) on FSDP2 train ranks.

The ranks' collectives must match one for one, while their rows differ (count, lengths,
whether prompts repeat, which decides one or two forwards in `response_logits`). So no
forward or backward communicates: each minibatch starts by all-gathering every parameter
group (`gathered`), gradients accumulate locally over the rank's micro-batches, and one
zero-weighted pass on a single template row inside `sync_gradients` reduce-scatters them
(every rank runs exactly that one pass). FSDP2 averages gradients over ranks when it
reduces them, which is why the update core backpropagates `world_size * loss`. The stats
and the skip decision for a non-finite loss or gradient are all-reduced (float64), so
either every rank steps the optimizer or none does. gloo on CPU, NCCL on CUDA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.distributed as dist

from arborl.distributed import sharding

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


class FSDPComm:
    """Collectives of the process group this rank joined (`sharding.init_process_group`)."""

    @property
    def world_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    def all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        if dist.is_initialized():
            if dist.get_backend() == "nccl":
                t = t.cuda()
            dist.all_reduce(t, op=_OPS[op])
        return t.cpu().tolist()

    def gathered(self, model) -> contextlib.AbstractContextManager:
        return sharding.gathered(model)

    def sync_gradients(self, model, zero_pass: Callable[[], None]) -> None:
        with sharding.sync_gradients(model):  # the one reduce-scatter of this step
            zero_pass()

    def norm_value(self, norm) -> float:
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        return float(norm)


FSDP = FSDPComm()
