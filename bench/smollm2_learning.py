"""SmolLM2-135M-Instruct learning FrozenLake: collect the runs into one table and JSON.

The runs themselves are plain `arborl` commands (docs/BENCHMARKS.md lists them, each under
`/usr/bin/time -v` for the peak RSS, its `uptime` written beside it): zero-shot (`arborl
sft ... sft.steps=0`: only the held-out evaluation), SFT on oracle demos (`arborl sft`),
then GRPO from the SFT policy with LoRA and with full fine-tuning (`arborl train`). This
script reads each run directory (summary.json or, for `arborl sft`, metrics.jsonl) and the
`time -v` log next to it, and writes `bench/results/smollm2_learning.json`:

    python bench/smollm2_learning.py --runs-dir /tmp/smol/runs zeroshot sft rl_lora rl_full
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from common import cpu_model, format_table, write_json

from arborl.train.evaluate import paired_gain


def peak_rss_mb(time_log: Path) -> float | None:
    """`Maximum resident set size (kbytes)` from a `/usr/bin/time -v` log, in MB."""
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_log.read_text())
    return int(m.group(1)) / 1024 if m else None


def read_records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def rl_step_times(records: list[dict]) -> dict[str, float] | None:
    """Median seconds per RL step (wall between step records), rollout and update."""
    rl = [r for r in records if "train/success" in r]
    if not rl:
        return None
    walls = [b["time_s"] - a["time_s"] for a, b in zip(rl, rl[1:], strict=False)]
    return {
        "s_per_step": statistics.median(walls) if walls else float("nan"),
        "rollout_s": statistics.median(r["time/rollout_s"] for r in rl),
        "update_s": statistics.median(r["time/update_s"] for r in rl),
        "train_success_by_step": [r["train/success"] for r in rl],
    }


def sft_step_time(records: list[dict]) -> float | None:
    sft = [r for r in records if "sft/loss" in r]
    walls = [b["time_s"] - a["time_s"] for a, b in zip(sft, sft[1:], strict=False)]
    return statistics.median(walls) if walls else None


def collect(runs_dir: Path, name: str) -> dict:
    run = runs_dir / name
    records = read_records(run)
    # the runs folder is a machine path: results name it <runs>
    config = (run / "config.yaml").read_text().replace(str(runs_dir.resolve()), "<runs>")
    out: dict = {"name": name, "config": config}
    summary = json.loads((run / "summary.json").read_text())
    if "gain" in summary:  # arborl train
        out.update({k: summary[k] for k in ("before", "after", "gain", "steps", "wall_s")})
    else:  # arborl sft: the SFT stats and the held-out evaluation after it
        out.update(after=summary["after"], sft=summary["sft"])
        out["sft_steps"] = sum("sft/loss" in r for r in records)
        out["sft_s_per_step"] = sft_step_time(records)
    out["rl"] = rl_step_times(records)
    log = runs_dir / f"{name}.log"
    out["peak_rss_mb"] = peak_rss_mb(log) if log.exists() else None
    up = runs_dir / f"{name}.uptime"
    out["uptime"] = up.read_text().strip().splitlines() if up.exists() else None
    return out


def gain_over_zero(after: dict) -> dict[str, float]:
    """The paired gain over a baseline that lost every one of the same tasks (the zero-shot
    run): each task's difference is then its outcome after, so the wins are all we need."""
    n, wins = int(after["episodes"]), round(after["success"] * after["episodes"])
    before = dict.fromkeys(range(n), 0.0)
    return paired_gain(before, {i: float(i < wins) for i in range(n)})


def ci(r: dict | None, key: str = "success") -> str:
    if not r:
        return "-"
    return f"{r[key]:.3f} [{r[key + '_lo']:.3f}, {r[key + '_hi']:.3f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="run names under --runs-dir")
    p.add_argument("--runs-dir", default="runs", help="folder holding the run directories")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/...)")
    p.add_argument("--zero-shot", default=None, help="run whose evaluation is the SFT baseline")
    args = p.parse_args()
    rows, results = [], []
    base = collect(Path(args.runs_dir), args.zero_shot)["after"] if args.zero_shot else None
    for name in args.runs:
        r = collect(Path(args.runs_dir), name)
        if base is not None and "sft" in r and r["sft"].get("sft/loss") is not None:
            if base["success"] != 0.0:
                raise SystemExit(f"--zero-shot {args.zero_shot} won some tasks: no pairing")
            r["before"], r["gain"] = base, gain_over_zero(r["after"])
        results.append(r)
        gain = r.get("gain")
        rows.append([
            name, ci(r.get("before")), ci(r["after"]),
            ci(gain, "gain") if gain else "-", r.get("steps", r.get("sft_steps")),
            (r["rl"] or {}).get("s_per_step", r.get("sft_s_per_step")), r["peak_rss_mb"],
        ])  # fmt: skip
    headers = ["run", "before [95% CI]", "after [95% CI]", "paired gain [95% CI]", "steps",
               "s/step", "peak RSS (MB)"]  # fmt: skip
    print(format_table(headers, rows))
    path = write_json({"cpu_model": cpu_model(), "runs": results}, args.out, "smollm2_learning")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
