"""Helpers shared by the `bench/` scripts: machine facts, medians, a text table, JSON output.

Benchmarks on a shared box are noisy, so every script interleaves the methods it compares
(A B A B ...) inside one process and reports medians; `machine_info` records the load
average next to the numbers so a reader can tell a quiet run from a busy one.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from arborl.report.compare import format_table  # noqa: F401 - the scripts' table, one copy

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def cpu_facts() -> dict[str, Any]:
    """The CPU's model name (as `lscpu` prints it) and its AVX-512 / AMX flags, read from
    /proc/cpuinfo: machines of one kind differ (Xeon with AMX, EPYC without), and bf16
    matmul speed depends on it. Empty values where /proc/cpuinfo is absent (not Linux)."""
    model, flags = None, []
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = value.split()
    wanted = sorted(f for f in flags if f.startswith(("avx512", "amx")))
    return {
        "cpu_model": model or platform.processor() or None,
        "cpu_avx512": any(f.startswith("avx512") for f in flags),
        "cpu_amx": any(f.startswith("amx") for f in flags),
        "cpu_flags": wanted,
    }


def machine_info(num_threads: int) -> dict[str, Any]:
    """Versions, CPU model and flags, core count, torch threads and the load average."""
    import torch
    import transformers

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **cpu_facts(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_num_threads": num_threads,
        # the ATen kernel set (AVX2 / AVX512...): a different one rounds differently
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "loadavg": list(os.getloadavg()),
    }
    try:
        import trl

        info["trl"] = trl.__version__
    except ImportError:
        info["trl"] = None
    return info


def cpu_model() -> str:
    """The CPU's model name, as `lscpu` prints it ("" where /proc/cpuinfo has none)."""
    return cpu_facts()["cpu_model"] or ""


def median(values: list[float]) -> float:
    """Median of a non-empty list (NaN when empty, so a missing side shows up in the table)."""
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> float:
    """a / b, NaN when b is zero."""
    return a / b if b else float("nan")


def write_json(result: dict[str, Any], out: str | None, name: str) -> Path:
    """Write `result` to `out` or `bench/results/<name>.json`; return the path."""
    path = Path(out) if out else RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
    return path
