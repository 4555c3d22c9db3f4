"""Which compute dtype pays on this machine: the choice behind `model.dtype=auto`.

bf16 mixed precision (float32 master weights, forward and backward under autocast) is ~3x
faster for SmolLM2 on a CPU with AMX-BF16, and far slower than float32 on one without a
bf16 unit, where every bf16 GEMM is emulated (an AVX2-only AMD EPYC of our kind measured
under 1 GFLOP/s in bf16 against 2-21 in float32, load ~9). So `auto` picks bf16 only
where (1) the CPU has AMX-BF16 or AVX512-BF16 (or the device is a GPU with bf16), (2) the
model is wide enough for its GEMMs to dominate (hidden size >= `MIN_HIDDEN`: the tiny
presets stay float32 and keep their documented results), and (3) a GEMM of the model's own
shapes, timed here in both dtypes, runs at least `MIN_SPEEDUP` times faster in bf16. The
choice is made once per process and model and says why (`DtypeChoice.reason`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
MIN_HIDDEN = 512
MIN_SPEEDUP = 1.5
GEMM_TOKENS = 512  # rows of the timed GEMM: a micro-batch's order of magnitude


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str
    """"float32" or "bfloat16"."""
    reason: str
    """One line for the run log: what was found and measured."""


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The bf16 matrix features this CPU reports (`BF16_CPU_FLAGS` found in its flags)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return []
    flags = next(
        (ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []
    )
    return [f for f in BF16_CPU_FLAGS if f in flags]


def model_shape(name_or_path: str) -> tuple[int, int] | None:
    """(hidden size, MLP width) of a preset, a pretrained name or an HF directory, read
    without loading weights; None when it cannot be told (then `auto` means float32)."""
    from arborl.models.loading import MODEL_PRESETS
    from arborl.models.pretrained import PRETRAINED

    if name_or_path in MODEL_PRESETS:
        p = MODEL_PRESETS[name_or_path]
        return p.hidden_size, p.ffn_size
    if name_or_path in PRETRAINED:
        p = PRETRAINED[name_or_path]
        return (p.hidden_size, p.ffn_size) if p.hidden_size else None
    config = Path(name_or_path) / "config.json"
    try:
        c = json.loads(config.read_text())
        return int(c["hidden_size"]), int(c.get("intermediate_size") or 4 * c["hidden_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def gemm_gflops(hidden: int, ffn: int, dtype: str, repeats: int = 5) -> float:
    """GFLOP/s of a (GEMM_TOKENS x hidden) @ (hidden x ffn) matmul in `dtype`, best of
    `repeats` after a warm-up, on torch's current threads."""
    import torch

    dt = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(GEMM_TOKENS, hidden, generator=gen).to(dt)
    b = torch.randn(hidden, ffn, generator=gen).to(dt)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * GEMM_TOKENS * hidden * ffn / max(best, 1e-9) / 1e9


def choose_dtype(
    name_or_path: str, flags: list[str] | None = None, measure=gemm_gflops
) -> DtypeChoice:
    """The compute dtype `model.dtype=auto` resolves to for this model here (module doc)."""
    import torch

    if torch.cuda.is_available():
        if torch.cuda.is_bf16_supported():
            return DtypeChoice("bfloat16", "a CUDA device with bf16 support")
        return DtypeChoice("float32", "a CUDA device without bf16 support")
    flags = cpu_bf16_flags() if flags is None else flags
    if not flags:
        return DtypeChoice(
            "float32",
            f"this CPU has no bf16 matrix unit ({' or '.join(BF16_CPU_FLAGS)}): bf16 would be emulated",
        )
    shape = model_shape(name_or_path)
    if shape is None or shape[0] < MIN_HIDDEN:
        width = "unknown" if shape is None else str(shape[0])
        return DtypeChoice(
            "float32", f"hidden size {width} < {MIN_HIDDEN}: too narrow for bf16 GEMMs to pay"
        )
    fp32, bf16 = measure(*shape, "float32"), measure(*shape, "bfloat16")
    rates = f"{', '.join(flags)}; a {GEMM_TOKENS}x{shape[0]}x{shape[1]} GEMM ran {fp32:.0f} GFLOP/s in float32, {bf16:.0f} in bf16"
    if bf16 >= MIN_SPEEDUP * fp32:
        return DtypeChoice("bfloat16", rates)
    return DtypeChoice("float32", f"{rates}: under the {MIN_SPEEDUP}x that pays for the casts")


_CHOSEN: dict[str, DtypeChoice] = {}


def resolve_dtype_setting(setting: str, name_or_path: str) -> DtypeChoice:
    """`model.dtype` as set ("float32", "bfloat16") or resolved once per process and model
    ("auto"), with the reason the run log gives."""
    if setting != "auto":
        return DtypeChoice(setting, "set by model.dtype")
    if name_or_path not in _CHOSEN:
        _CHOSEN[name_or_path] = choose_dtype(name_or_path)
    c = _CHOSEN[name_or_path]
    return DtypeChoice(c.dtype, f"model.dtype=auto: {c.reason}")


def explain(dtype: str, name_or_path: str) -> str:
    """The run log's line for a resolved `model.dtype`: why `auto` chose it in this
    process, or that the config (or a resumed run's config.yaml) set it."""
    c = _CHOSEN.get(name_or_path)
    why = f"model.dtype=auto: {c.reason}" if c and c.dtype == dtype else "set by model.dtype"
    return f"compute dtype {dtype} ({why})"
