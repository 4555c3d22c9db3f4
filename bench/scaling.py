"""How the cost of one RL step grows: step time and peak memory along four axes.

Each point builds `arborl.train.rl.RLTrainer` from `load_train_config` (no SFT, no
checkpoints, no trajectories, plots, report or loggers) on the demo env arborl/Maze-v0,
runs one warm-up RL step and times the next `--steps` (the median, or the faster of two,
is reported: foreign load on a shared box only ever adds time). One axis is varied at a time from the
base point (tiny-1m, 16 tasks x 8 = 128 episodes, max_turns 16, in-process env pool):

* episodes per step: 64, 128, 256, 512, 1,024 (rollout.num_tasks x rollout.group_size 8);
* model size: tiny-1m, tiny-20m and a ~100M llama built here the way the presets are
  (`bench-100m`, registered in this process only), at a smaller batch (4 x 4 episodes,
  max_turns 4) so that a 100M step fits on 2 CPU cores;
* turns per episode: rollout.max_turns (and the env's own limit) 4, 8, 16, 32, on a
  bigger maze (size 10, shortest paths 12-30) that an untrained policy rarely solves, so
  episodes really run to the limit (the mean turns taken are reported);
* env pool: in-process, and subprocess workers 1, 2, 4.

Every point runs in a fresh child process, so its peak RSS (`ru_maxrss`) is its own; the
RSS right before the trainer is built is recorded too (torch and the imports), and the
difference is what the point itself added. The trainer's own breakdown (`time/rollout_s`,
`time/update_s`) is kept per point. Per axis the growth is fitted as the slope of
log(step time) against log(axis value): ~1 is linear, < 1 sub-linear (fixed costs), > 1
super-linear.

    python bench/scaling.py            # every axis (~10 min on 2 cores at load 4-5)
    python bench/scaling.py --quick    # toy size, what tests/bench runs
    python bench/scaling.py --axes episodes turns
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RESULTS_DIR, format_table, write_json

BASE = {"model": "tiny-1m", "num_tasks": 16, "group_size": 8, "max_turns": 16, "pool": "inproc"}
"""The base point every axis varies from (the demo's RL step)."""
LONG_MAZE = {"size": 10, "min_path": 12, "max_path": 30}
"""Maze knobs of the turns axis: long shortest paths, so untrained episodes hit the limit."""
BIG_PRESET = {"hidden": 768, "layers": 14, "heads": 12, "kv_heads": 12, "ffn": 2048}
"""`bench-100m`: a llama of ~100M parameters (shape in the spirit of the tiny presets)."""


def point_overrides(p: dict[str, Any], workdir: str) -> list[str]:
    """The `load_train_config` overrides of one point."""
    return [
        f"model.name_or_path={p['model']}",
        f"rollout.num_tasks={p['num_tasks']}",
        f"rollout.group_size={p['group_size']}",
        f"rollout.max_turns={p['max_turns']}",
        f"env.pool_mode={'inproc' if p['pool'] == 'inproc' else 'subprocess'}",
        "sft.enabled=false",
        # train on every row: an untrained policy mostly fails, and with the default
        # (drop rows of zero advantage) the update would shrink to nothing
        "algo.drop_zero_adv=false",
        "eval.num_episodes=4",
        "trainer.total_steps=8",
        "trainer.save_every=0",
        "trainer.save_trajectories=0",
        "trainer.plots=false",
        "trainer.report=false",
        "trainer.loggers=[]",
        "trainer.progress=false",
        f"trainer.output_dir={workdir}",
        "trainer.name=scaling",
    ]


def register_big_preset() -> None:
    """Add `bench-100m` to the preset table of this process (the library is not changed)."""
    from arborl.models.loading import MODEL_PRESETS, ModelPreset

    b = BIG_PRESET
    MODEL_PRESETS["bench-100m"] = ModelPreset(
        "llama", b["hidden"], b["layers"], b["heads"], b["kv_heads"], b["ffn"]
    )


def rss_mb() -> float:
    """Current resident set of this process in MiB (from /proc; 0 where there is none)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_point(p: dict[str, Any]) -> dict[str, Any]:
    """Child process: build the trainer, one warm-up step, one timed step; the figures."""
    import torch

    from arborl.train.config import load_train_config
    from arborl.train.rl import RLTrainer

    register_big_preset()
    rss_before = rss_mb()
    with tempfile.TemporaryDirectory() as workdir:
        cfg = load_train_config(point_overrides(p, workdir))
        kwargs = dict(cfg.env.kwargs)
        if p.get("long_maze"):
            kwargs.update(LONG_MAZE, max_turns=p["max_turns"])
        if p["pool"] != "inproc":
            kwargs["num_workers"] = int(p["pool"].split("-")[1])
        cfg.env.kwargs = kwargs
        t0 = time.perf_counter()
        trainer = RLTrainer(cfg)
        trainer.engine.prepare(warm_start=False)
        build_s = time.perf_counter() - t0
        params = sum(x.numel() for x in trainer.engine.model.parameters())
        trainer.rl_step()  # warm-up
        trainer.step += 1
        steps = []
        for _ in range(p.get("timed_steps", 1)):
            t0 = time.perf_counter()
            m = trainer.rl_step()
            steps.append((time.perf_counter() - t0, m))
            trainer.step += 1
        # the median step (of an odd count; the faster of two), with its own breakdown
        steps.sort(key=lambda s: s[0])
        step_s, m = steps[(len(steps) - 1) // 2]
        trainer.engine.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {
        **p,
        "episodes": p["num_tasks"] * p["group_size"],
        "params": params,
        "build_s": build_s,
        "step_s": step_s,
        "all_step_s": [s for s, _ in steps],
        "rollout_s": m["time/rollout_s"],
        "update_s": m["time/update_s"],
        "other_s": step_s - m["time/rollout_s"] - m["time/update_s"],
        "mean_turns": m["train/mean_turns"],
        "success": m["train/success"],
        "rows": float(m["train/mean_turns"]) * p["num_tasks"] * p["group_size"],
        "tokens_per_s": m.get("rollout/tokens_per_s", float("nan")),
        "rss_before_mb": rss_before,
        "peak_rss_mb": peak,
        "added_rss_mb": peak - rss_before,
        "torch_threads": torch.get_num_threads(),
        "time_metrics": {k: v for k, v in m.items() if k.startswith("time/")},
    }


def axes(quick: bool) -> dict[str, list[dict[str, Any]]]:
    """Axis name -> its points (dicts of BASE's keys, plus `value`, the axis coordinate)."""

    def pt(value, **kw) -> dict[str, Any]:
        return {**BASE, **kw, "value": value}

    if quick:
        small = {"num_tasks": 2, "group_size": 2, "max_turns": 2, "model": "tiny-0.1m"}
        return {
            "episodes": [pt(n, **{**small, "num_tasks": n // 2}) for n in (4, 8)],
            "model": [pt(0, **small)],
            "turns": [pt(t, **{**small, "max_turns": t}, long_maze=True) for t in (2, 4)],
            "pool": [pt(0, **small), pt(1, **small, pool="subprocess-1")],
        }
    small = {"num_tasks": 4, "group_size": 4, "max_turns": 4}
    return {
        "episodes": [pt(n, num_tasks=n // 8) for n in (64, 128, 256, 512, 1024)],
        "model": [pt(0, **small, model=m) for m in ("tiny-1m", "tiny-20m", "bench-100m")],
        "turns": [pt(t, max_turns=t, long_maze=True) for t in (4, 8, 16, 32)],
        "pool": [pt(0, pool="inproc")] + [pt(w, pool=f"subprocess-{w}") for w in (1, 2, 4)],
    }


def spawn(p: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one point in a fresh interpreter (its own peak RSS); the figures or the error."""
    cmd = [sys.executable, __file__, "--point", json.dumps(p)]
    # the checkout this script is in comes first: its arborl, not another installed copy
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, *sys.path])}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {**p, "error": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0:
        return {**p, "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x) (NaN with fewer than 2 usable points)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(a for a, _ in pts) / len(pts)
    my = sum(b for _, b in pts) / len(pts)
    sxx = sum((a - mx) ** 2 for a, _ in pts)
    return sum((a - mx) * (b - my) for a, b in pts) / sxx if sxx else float("nan")


def x_of(axis: str, r: dict[str, Any]) -> float:
    """The coordinate a point is fitted on: episodes, parameters, mean turns taken, workers."""
    return {
        "episodes": r.get("episodes", 0),
        "model": r.get("params", 0),
        "turns": r.get("mean_turns", 0),
        "pool": r.get("value", 0),
    }[axis]


def fits(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per axis the log-log slopes of step time, rollout, update and added memory."""
    out: dict[str, dict[str, float]] = {}
    for axis, rows in results.items():
        ok = [r for r in rows if "error" not in r and (axis != "pool" or r["pool"] != "inproc")]
        xs = [x_of(axis, r) for r in ok]
        out[axis] = {
            key: loglog_slope(xs, [r[key] for r in ok])
            for key in ("step_s", "rollout_s", "update_s", "added_rss_mb")
        }
    return out


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Step time (and its rollout / update parts) and added RSS per axis, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {
        "episodes": "episodes per step",
        "model": "parameters",
        "turns": "mean turns per episode",
        "pool": "subprocess env workers",
    }
    fig, grid = plt.subplots(2, len(results), figsize=(4 * len(results), 7), squeeze=False)
    for col, (axis, rows) in enumerate(results.items()):
        ok = [r for r in rows if "error" not in r]
        sub = [r for r in ok if axis != "pool" or r["pool"] != "inproc"]
        xs = [x_of(axis, r) for r in sub]
        ax = grid[0][col]
        for key, style in (("step_s", "o-"), ("rollout_s", "s--"), ("update_s", "^:")):
            ax.plot(xs, [r[key] for r in sub], style, label=key.removesuffix("_s"))
        if axis == "pool":
            for r in ok:
                if r["pool"] == "inproc":
                    ax.axhline(r["step_s"], color="grey", lw=0.8, label="inproc step")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(labels[axis])
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7)
        mem = grid[1][col]
        mem.plot(xs, [r["peak_rss_mb"] for r in sub], "o-", label="peak RSS")
        mem.plot(xs, [r["added_rss_mb"] for r in sub], "s--", label="added by the point")
        mem.set_xscale("log")
        mem.set_xlabel(labels[axis])
        mem.set_ylabel("MiB")
        mem.legend(fontsize=7)
    fig.suptitle("arborl RL step cost on arborl/Maze-v0 (one axis at a time)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="toy sizes (the smoke test)")
    ap.add_argument(
        "--axes", nargs="+", default=["episodes", "model", "turns", "pool"],
        choices=["episodes", "model", "turns", "pool"], help="which axes to measure",
    )  # fmt: skip
    ap.add_argument("--steps", type=int, default=2, help="timed RL steps per point (after warm-up)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one point may take")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "scaling.json", help="JSON path")
    ap.add_argument("--plot", type=Path, default=None, help="PNG path (default: next to --out)")
    ap.add_argument("--point", default=None, help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args()
    if args.point is not None:
        print(json.dumps(run_point(json.loads(args.point))))
        return

    from common import machine_info

    results: dict[str, list[dict[str, Any]]] = {}
    t_start = time.perf_counter()
    load_start = list(os.getloadavg())
    plan = axes(args.quick)
    for points in plan.values():
        for p in points:
            p["timed_steps"] = args.steps
    for axis in args.axes:
        results[axis] = []
        for p in plan[axis]:
            r = spawn(p, args.timeout)
            r["loadavg"] = list(os.getloadavg())
            results[axis].append(r)
            status = r.get("error") or f"step {r['step_s']:.2f} s, peak {r['peak_rss_mb']:.0f} MiB"
            print(f"[{axis}] {p} -> {status}", file=sys.stderr, flush=True)
    slopes = fits(results)

    headers = ["axis", "point", "params", "episodes", "mean turns", "step s", "rollout s",
               "update s", "peak RSS MiB", "added MiB", "load"]  # fmt: skip
    rows = []
    for axis, pts in results.items():
        for r in pts:
            if "error" in r:
                rows.append(
                    [axis, r.get("value"), "-", "-", "-", str(r["error"]), "", "", "", "", ""]
                )
                continue
            label = {"model": r["model"], "pool": r["pool"]}.get(axis, r["value"])
            rows.append([
                axis, label, f"{r['params'] / 1e6:.1f}M", r["episodes"], r["mean_turns"],
                r["step_s"], r["rollout_s"], r["update_s"], r["peak_rss_mb"],
                r["added_rss_mb"], f"{r['loadavg'][0]:.1f}",
            ])  # fmt: skip
    print(format_table(headers, rows))
    print()
    print(format_table(
        ["axis", "slope step", "slope rollout", "slope update", "slope added RSS"],
        [[a, s["step_s"], s["rollout_s"], s["update_s"], s["added_rss_mb"]]
         for a, s in slopes.items()],
    ))  # fmt: skip

    doc = {
        "benchmark": "scaling",
        "quick": args.quick,
        "machine": {**machine_info(1), "loadavg_start": load_start},
        "base": BASE,
        "long_maze": LONG_MAZE,
        "bench_100m": BIG_PRESET,
        "wall_s": time.perf_counter() - t_start,
        "results": results,
        "slopes": slopes,
    }
    write_json(doc, str(args.out), "scaling")
    png = args.plot or args.out.with_suffix(".png")
    plot(results, png)
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
