"""FSDP2 sharding of HF models over one `torch.distributed` process group.

`init_process_group` picks the backend from the device (gloo on CPU, NCCL on CUDA) and
rendezvouses over TCP at an address the controller got from rank 0, so Ray actors on any
node form one group without a launcher. `shard_model` applies `fully_shard` to each
transformer block and then to the root (the embedding, final norm and a tied LM head
share the root's group), so parameters, gradients and AdamW states are all split
`Shard(0)` across ranks. `gather_full_state` is the weight-sync gather: every rank takes
part, rank 0 (or every rank, for colocated rollout) receives the full tensors.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


def free_port() -> int:
    """A TCP port that is free on this host right now (for the rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def pick_device(num_gpus: float) -> torch.device:
    """CUDA when this process was given a GPU and torch sees one, else CPU."""
    if num_gpus > 0:
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"ray.gpus_per_rank={num_gpus} but torch sees no CUDA device on this "
                "node; set ray.gpus_per_rank=0 to train on CPU"
            )
        return torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU
    return torch.device("cpu")


def init_process_group(
    rank: int, world_size: int, addr: str, port: int, device: torch.device
) -> str:
    """Join the train group; returns the backend used ("gloo" or "nccl")."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    if dist.is_initialized():
        return dist.get_backend()
    dist.init_process_group(
        backend,
        init_method=f"tcp://{addr}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=10),
    )
    return backend


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated decoder blocks of an HF causal LM, a peft wrapper or a `ValueModel`."""
    for path in ("model.layers", "backbone.layers", "layers", "base_model.model.model.layers"):
        mod = model
        for part in path.split("."):
            mod = getattr(mod, part, None)
            if mod is None:
                break
        if isinstance(mod, nn.ModuleList):
            return list(mod)
    raise ValueError(
        f"cannot find the transformer blocks of {type(model).__name__} (looked for "
        "model.layers / backbone.layers); FSDP2 needs them to shard per block"
    )


def mixed_precision(device: torch.device, dtype: str):
    """bf16 compute with fp32 gradient reduction on GPUs with bf16 (or when asked for)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    use_bf16 = dtype == "bfloat16" or (device.type == "cuda" and torch.cuda.is_bf16_supported())
    if not use_bf16:
        return None
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def shard_model(model: nn.Module, mesh, mp_policy=None) -> nn.Module:
    """`fully_shard` each block, then the root; returns the (same, now sharded) module."""
    from torch.distributed.fsdp import fully_shard

    kwargs = {"mesh": mesh}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    for block in transformer_blocks(model):
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    # Parameters are gathered explicitly (`gathered`) and gradients reduced once per
    # optimizer step (`sync_gradients`), never implicitly by a forward or backward: the
    # shared-prompt scoring runs one or two forwards depending on the rows, so implicit
    # collectives would differ between ranks and deadlock.
    model.set_reshard_after_forward(False)
    model.set_reshard_after_backward(False)
    model.set_requires_gradient_sync(False)
    return model


def fsdp_modules(model: nn.Module) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """All-gather every FSDP group of `model` (same order on every rank) for the block,
    and reshard on exit: inside, forwards and backwards issue no collectives."""
    mods = fsdp_modules(model)
    for m in mods:
        m.unshard()
    try:
        yield
    finally:
        for m in mods:
            m.reshard()


@contextlib.contextmanager
def sync_gradients(model: nn.Module) -> Iterator[None]:
    """The one backward inside this block reduce-scatters the accumulated gradients."""
    model.set_requires_gradient_sync(True)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(False)


def device_mesh(world_size: int, device: torch.device):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (world_size,))


def gather_full_state(model: nn.Module, to_all: bool = False) -> dict[str, torch.Tensor]:
    """Full (unsharded) state dict on CPU: on rank 0 only, or on every rank with `to_all`.

    A collective: every rank of the group must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=not to_all)
    state = get_model_state_dict(model, options=opts)
    if to_all:
        state = {k: v.detach().cpu() for k, v in state.items()}
    return state


def state_to_numpy(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Tensors -> numpy for the object store (bf16 travels as fp32: numpy has no bf16)."""
    out = {}
    for k, v in state.items():
        v = v.detach().cpu()
        out[k] = (v.float() if v.dtype == torch.bfloat16 else v).contiguous().numpy()
    return out


def load_numpy_state(model: nn.Module, state: dict[str, np.ndarray]) -> None:
    """Load a full numpy state into an unsharded model (copy: store buffers are read-only)."""
    tensors = {k: torch.from_numpy(np.array(v)) for k, v in state.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    real_missing = [k for k in missing if not (tied and "lm_head" in k)]
    if unexpected or real_missing:
        raise RuntimeError(
            f"weight sync does not match the rollout model: missing {real_missing}, "
            f"unexpected {unexpected}; rollout and train models must be built from the same "
            "model.name_or_path / lora settings"
        )
    if tied:
        model.tie_weights()


def local_param_bytes(model: nn.Module) -> int:
    """Bytes of this rank's share of the parameters (a DTensor counts its local shard)."""
    total = 0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total
