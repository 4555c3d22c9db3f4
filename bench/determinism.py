"""Why before-RL numbers differ between machines: the same SFT warm start and held-out
evaluation under different CPU kernel choices and thread counts, compared bit for bit.

Each variant runs `arborl sft` (SFT on oracle demos, then the held-out evaluation) in a
fresh process with the given environment variables and overrides, and records the final
SFT loss (all digits), a hash of the trained weights and the held-out success. Variants
that change only *which kernels compute the same math* (AVX2 vs AVX-512 vectorised ops in
ATen, MKL's instruction set for fp32 matmuls, 1 vs 2 threads) give different float
rounding; SFT amplifies that over hundreds of steps and sampling turns it into different
episodes, hence different held-out numbers for the same seed. A repeat of the default
variant shows what one machine does on its own (bit-identical when nothing changes).

    python bench/determinism.py                 # all variants (~2 min each on 2 cores)
    python bench/determinism.py --variants default repeat avx2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS_DIR, format_table, machine_info, write_json

VARIANTS: dict[str, tuple[dict[str, str], list[str]]] = {
    "default": ({}, []),
    "repeat": ({}, []),
    "aten-avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, []),
    "mkl-avx2": ({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, []),
    "mkl-cbwr-avx2": ({"MKL_CBWR": "AVX2"}, []),
    "threads-2": ({}, ["trainer.num_threads=2"]),
}
"""Name -> (environment variables, extra config overrides)."""


def weights_hash(policy_dir: Path) -> str:
    """sha256 (first 12 hex) of the saved policy weights."""
    files = sorted(policy_dir.glob("*.safetensors"))
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def run_variant(name: str, args) -> dict:
    env_vars, extra = VARIANTS[name]
    out = Path(args.work_dir) / name
    sets = [
        f"sft.steps={args.sft_steps}", f"eval.num_episodes={args.eval_episodes}",
        "trainer.progress=false", *extra, *args.set,
    ]  # fmt: skip
    cmd = [sys.executable, "-m", "arborl.cli.main", "sft", *sets, "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, env={**os.environ, **env_vars}, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"variant {name} failed: {proc.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {
        "variant": name, "env": env_vars, "overrides": extra,
        "sft_loss": summary["sft"].get("sft/loss"), "success": summary["after"]["success"],
        "weights": weights_hash(out / "checkpoints" / "sft" / "policy"),
        "wall_s": round(time.perf_counter() - t0, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                   help="which variants to run (default: all)")  # fmt: skip
    p.add_argument("--sft-steps", type=int, default=100, help="SFT optimizer steps per run")
    p.add_argument("--eval-episodes", type=int, default=200, help="held-out episodes per run")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra config override for every run (repeatable)")  # fmt: skip
    p.add_argument("--work-dir", default="runs/bench-determinism", help="where runs go")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/determinism.json)")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    rows = [run_variant(v, args) for v in args.variants]
    base = rows[0]
    headers = ["variant", "env / overrides", "SFT loss", "weights", "same as first", "success"]
    table = [
        [r["variant"], " ".join([*(f"{k}={v}" for k, v in r["env"].items()), *r["overrides"]])
         or "-", repr(r["sft_loss"]), r["weights"], r["weights"] == base["weights"],
         r["success"]]
        for r in rows
    ]  # fmt: skip
    print(format_table(headers, table))
    machine = {**machine_info(1), "loadavg_before": list(load_before)}
    # the work dir is this machine's folder: recorded as a placeholder, not a path
    setup = {**vars(args), "work_dir": "<work-dir>"}
    result = {"benchmark": "determinism", "setup": setup, "runs": rows, "machine": machine}
    print("wrote", write_json(result, args.out or str(RESULTS_DIR / "determinism.json"), "x"))


if __name__ == "__main__":
    main()
