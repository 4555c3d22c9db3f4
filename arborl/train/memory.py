"""How many tokens one forward/backward of the update may hold (`algo.micro_batch_tokens`).

A micro-batch's activations, kept by autograd for the backward pass, grow with its tokens,
and how fast depends on the model: about 0.013 MiB a token for the 0.1M preset, 0.9 MiB for
SmolLM2-135M (float32, measured with `activation_bytes_per_token`). A fixed budget of
16,384 tokens is nothing for the first and ~15 GiB of saved activations (~23 GiB at peak)
for the second, which on a 24 GiB machine the kernel answers by killing the run in its first
update. So when `algo.micro_batch_tokens` is
None (the default) the budget is sized once, before training: the activation bytes a token
costs are measured on a short forward pass, and the budget is the largest power of two whose
micro-batch (twice its saved activations: the backward's transients) takes at most half the
memory free then, capped at `CAP`. Tiny models always get `CAP`, so their runs are what they
were with the old fixed default; a power of two keeps the budget the same when free memory
moves a little between runs. A value the config sets is used as given, with a warning when it
looks too big for the memory free.

On CPU, "free" is the smaller of the host's available RAM and what the process's cgroup
(a container's `--memory`, a Kubernetes limit, `systemd-run -p MemoryMax=`) still allows:
the host's figure alone sized a 4 GiB container's run to the host's 22 GiB and the kernel
killed it at the first update. `cgroup_free_bytes` reads cgroup v2 (`memory.max` -
`memory.current`) or v1 (`memory.limit_in_bytes` - `memory.usage_in_bytes`) at every level
from the process's own cgroup up to the root; the log line says which figure was used.

    budget = resolve_micro_batch_tokens(model, cfg.algo.micro_batch_tokens)
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import psutil
import torch

log = logging.getLogger("arborl")

CAP = 16384
"""The largest automatic budget (the fixed default before the budget was sized)."""
FLOOR = 64
"""The smallest budget (`algo.micro_batch_tokens`' minimum); a longer row runs alone."""
SHARE_OF_FREE = 0.5
"""Fraction of the free memory one micro-batch may take (the rest: rollouts, optimizer
state, env workers, and what the probe cannot see)."""
PEAK_OVER_SAVED = 2.0
"""A micro-batch's peak memory over its saved activations. Measured on SmolLM2-135M with
LoRA on CPU: peak RSS ~1.45 MiB a token against 0.91 MiB saved (1.6x)."""
MIB = 2**20


def activation_bytes_per_token(
    model: torch.nn.Module, rows: int = 2, length: int = 128, dtype_ctx=None
) -> float:
    """Bytes autograd keeps for the backward pass per token of a forward of `model`,
    measured on `rows` x `length` random token ids (tensors saved for backward, each
    storage counted once, the model's own parameters left out). The global RNGs and the
    model's train/eval mode are left as they were."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in params and key not in seen:
            seen.add(key)
            saved += storage.nbytes()
        return t

    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=gen).to(device)  # (R, L)
    was_training = model.training
    model.train()  # dropout saves its masks: measure what the update keeps
    devices = [device.index or 0] if device.type == "cuda" else []
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    try:
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            with dtype_ctx or contextlib.nullcontext(), hooks:
                try:  # the LM head on one position: the update runs it on few
                    out = model(input_ids=ids, logits_to_keep=1)
                except TypeError:  # a model without `logits_to_keep`
                    seen.clear()
                    saved = 0
                    out = model(input_ids=ids)
            del out
    finally:
        model.train(was_training)
    return saved / (rows * length)


CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where the cgroup file systems are mounted (v2 at the root; v1's memory controller in
`memory/`)."""
SELF_CGROUP = Path("/proc/self/cgroup")
"""This process's cgroup paths, one line per hierarchy (`0::/path` for v2,
`N:memory:/path` for v1)."""
V1_UNLIMITED = 2**60
"""cgroup v1 writes "no limit" as a number near 2**63; anything this large is no limit."""


class CgroupUnreadable(ValueError):
    """A cgroup memory file that holds something other than a byte count."""


def _own_path(self_cgroup: Path, v1: bool) -> str:
    """This process's cgroup path in the v2 (`0::`) or v1 memory hierarchy; "/" when
    `self_cgroup` is missing or names none (in a container's cgroup namespace it is "/")."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if (v1 and "memory" in controllers.split(",")) or (not v1 and line.startswith("0::")):
            return path or "/"
    return "/"


def _read_bytes(path: Path) -> int | None:
    """The byte count in cgroup file `path`; None for "max" (v2's no limit)."""
    text = path.read_text().strip()
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        raise CgroupUnreadable(f"{path} holds {text[:40]!r}, not a byte count") from None


def _levels(base: Path, own: str) -> list[Path]:
    """`base/own` and each folder above it up to `base`, innermost first."""
    inner = base / own.strip("/")
    return [inner, *[p for p in inner.parents if p == base or base in p.parents]]


def cgroup_free_bytes(
    root: Path | None = None, self_cgroup: Path | None = None
) -> tuple[int | None, str]:
    """(bytes the process's cgroup still allows, what was read) or (None, why none): the
    least `limit - usage` over the levels from its cgroup up to the root that set a
    limit, v2 files when `root` has them, else v1's under `root/memory`. A file that is not
    a byte count gives (None, its path and content). Defaults: `CGROUP_ROOT`, `SELF_CGROUP`."""
    root, self_cgroup = root or CGROUP_ROOT, self_cgroup or SELF_CGROUP
    v2 = (root / "cgroup.controllers").exists() or (root / "memory.max").exists()
    base = root if v2 else root / "memory"
    limit_name, usage_name = (
        ("memory.max", "memory.current")
        if v2
        else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    )
    best: tuple[int, Path] | None = None
    try:
        for level in _levels(base, _own_path(self_cgroup, v1=not v2)):
            if not (level / limit_name).is_file():
                continue
            limit = _read_bytes(level / limit_name)
            if limit is None or limit >= V1_UNLIMITED:
                continue
            free = max(0, limit - (_read_bytes(level / usage_name) or 0))
            if best is None or free < best[0]:
                best = (free, level / limit_name)
    except (OSError, CgroupUnreadable) as e:
        return None, f"cgroup memory limit unreadable ({e})"
    if best is None:
        return None, "no cgroup memory limit"
    return best[0], f"cgroup limit {best[1]}"


def free_memory(
    device: torch.device, cgroup_root: Path | None = None, self_cgroup: Path | None = None
) -> tuple[int, str]:
    """(bytes free for new tensors on `device`, where that figure comes from): the GPU's
    free memory; on CPU the host's available RAM or, when smaller, what the cgroup still
    allows (`cgroup_free_bytes`; the source says why the host's figure was used)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]), "GPU free memory"
    host = int(psutil.virtual_memory().available)
    limited, why = cgroup_free_bytes(cgroup_root, self_cgroup)
    if limited is not None and limited < host:
        return limited, why
    if limited is not None:
        return host, f"host available memory (below the {why})"
    return host, f"host available memory ({why})"


def budget_for(per_token: float, free: int, share: int = 1) -> int:
    """The largest power of two of tokens in [FLOOR, CAP] whose peak (`PEAK_OVER_SAVED` x
    `per_token` bytes a token) fits in `SHARE_OF_FREE` of `free` bytes split `share` ways
    (processes sizing their micro-batches from the same memory); FLOOR when none fits."""
    fits = SHARE_OF_FREE * free / max(share, 1) / max(PEAK_OVER_SAVED * per_token, 1.0)
    budget = CAP
    while budget > FLOOR and budget > fits:
        budget //= 2
    return budget


def resolve_micro_batch_tokens(
    model: torch.nn.Module,
    requested: int | None,
    share: int = 1,
    dtype_ctx=None,
    device: torch.device | None = None,
) -> int:
    """`requested` (algo.micro_batch_tokens) when set, else the budget sized from `model`'s
    measured activation memory and the memory free now on `device` (default: the model's)
    split `share` ways (`budget_for`); logs which and why."""
    per_token = activation_bytes_per_token(model, dtype_ctx=dtype_ctx)
    free, source = free_memory(device or next(model.parameters()).device)
    auto = budget_for(per_token, free, share)
    facts = (
        f"activations ~{per_token / MIB:.3f} MiB a token (measured), "
        f"{free / 2**30:.1f} GiB free ({source})" + (f" for {share} processes" if share > 1 else "")
    )
    if requested is None:
        log.info("update micro-batches: up to %d tokens (%s; algo.micro_batch_tokens sets it)",
                 auto, facts)  # fmt: skip
        return auto
    if PEAK_OVER_SAVED * per_token * requested > free / max(share, 1):
        log.warning(
            "algo.micro_batch_tokens=%d may not fit in memory (%s: a full micro-batch would "
            "peak near %.1f GiB); if the run is killed, set algo.micro_batch_tokens=%d or "
            "leave it unset to size it automatically",
            requested, facts, PEAK_OVER_SAVED * per_token * requested / 2**30, auto,
        )  # fmt: skip
    return requested
