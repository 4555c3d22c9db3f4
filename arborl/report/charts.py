"""The report's charts as Plotly traces, built from metrics.jsonl records.

Charts are plain dicts (`{"id", "section", "title", "ytitle", "traces"}`) so that the page
only calls `Plotly.newPlot` on them and tests can count series without a browser. Each
chart overlays every run given (one colour per run). Sections are picked by metric-name
prefix rather than a fixed list, so a diagnostic the trainer starts logging tomorrow
(`adv/*`, `gigpo/*`, ...) shows up without a change here. Long curves are thinned to
`max_points` evenly spaced points (the first and last kept).
"""

from __future__ import annotations

from typing import Any

from arborl.report.load import RunData, spread

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")
BASELINE_DASH = {"random": "dot", "oracle": "dash"}
SKIP = {"step", "time_s", "phase"}
"""Record fields that are not metrics."""
EVAL_PREFIXES = ("eval/",)
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Rewards", ("reward/",)),
    ("Throughput", ("rollout/", "time/")),
    ("SFT", ("sft/",)),
    ("Off-policy and mismatch", ("mismatch/", "async/")),
)
"""Metric-name prefixes with a section of their own; the rest go to Diagnostics."""
COMBINED = {"reward/": "reward components (per episode)", "time/": "step time split (s)"}
"""Prefixes drawn as one chart with one series per metric instead of one chart each."""


def series(run: RunData, key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of `key` over the run's records (non-numbers skipped)."""
    xs, ys = [], []
    for r in run.metrics:
        v = r.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            xs.append(r.get("step", len(xs)))
            ys.append(float(v))
    return xs, ys


def thin(xs: list, ys: list, max_points: int) -> tuple[list, list]:
    """At most `max_points` (x, y) pairs, evenly spaced, the first and last kept."""
    pairs = spread(list(zip(xs, ys)), max_points)
    return [p[0] for p in pairs], [p[1] for p in pairs]


def metric_keys(runs: list[RunData]) -> list[str]:
    """Every numeric metric name over `runs`, in first-seen order."""
    seen: dict[str, None] = {}
    for run in runs:
        for r in run.metrics:
            for k, v in r.items():
                if k not in SKIP and isinstance(v, int | float) and not isinstance(v, bool):
                    seen.setdefault(k, None)
    return list(seen)


def line(run: RunData, i: int, xs, ys, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "scatter",
        "mode": "lines+markers" if len(xs) < 30 else "lines",
        "x": xs,
        "y": ys,
        "name": name,
        "legendgroup": run.name,
        "line": {"color": PALETTE[i % len(PALETTE)]},
        **extra,
    }


def eval_points(run: RunData) -> list[tuple[float, float, float, float]]:
    """(step, success, lo, hi) of every held-out evaluation, the final one included."""
    pts = []
    for r in run.metrics:
        for pre in ("eval/", "eval/final_"):
            if isinstance(r.get(f"{pre}success"), int | float):
                lo, hi = r.get(f"{pre}success_lo"), r.get(f"{pre}success_hi")
                v = r[f"{pre}success"]
                pts.append((r["step"], v, v if lo is None else lo, v if hi is None else hi))
    return sorted(pts, key=lambda p: p[0])


def success_chart(runs: list[RunData], max_points: int) -> dict[str, Any]:
    """Held-out success with its 95% intervals (error bars) and baseline lines."""
    traces = []
    steps = [p[0] for run in runs for p in eval_points(run)] or [0]
    x_span = [min(steps), max(max(steps), 1)]
    for i, run in enumerate(runs):
        pts = spread(eval_points(run), max_points)
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        err = {
            "type": "data",
            "symmetric": False,
            "array": [p[3] - p[1] for p in pts],
            "arrayminus": [p[1] - p[2] for p in pts],
        }
        traces.append(line(run, i, xs, ys, f"{run.name}: held-out", error_y=err))
    shown: set[tuple[str, str]] = set()
    for i, run in enumerate(runs):
        env = str(run.config.get("env", {}).get("id", ""))
        for name, row in run.baselines.items():
            if "success" not in row or (env, name) in shown:
                continue
            shown.add((env, name))
            label = f"{name}{f' ({env})' if len(runs) > 1 else ''}: {row['success']:.3f}"
            dash = BASELINE_DASH.get(name, "dashdot")
            traces.append(
                line(run, i, x_span, [row["success"]] * 2, label, mode="lines")
                | {"line": {"color": "#555", "dash": dash, "width": 1.5}, "legendgroup": name}
            )
    return chart("success", "Success", "held-out success (95% interval) and baselines", traces)


def chart(cid: str, section: str, title: str, traces: list, ytitle: str = "") -> dict:
    return {"id": cid, "section": section, "title": title, "ytitle": ytitle, "traces": traces}


def section_of(key: str) -> str:
    for name, prefixes in SECTIONS:
        if key.startswith(prefixes):
            return name
    return "Diagnostics"


def metric_chart(runs: list[RunData], keys: list[str], title: str, max_points: int) -> dict:
    """One chart of `keys` over every run (a series per run and key)."""
    traces = []
    for i, run in enumerate(runs):
        for j, key in enumerate(keys):
            xs, ys = thin(*series(run, key), max_points)
            if xs:
                name = key if len(runs) == 1 else f"{run.name}: {key}"
                extra = {"line": {"color": PALETTE[(i + j) % len(PALETTE)]}} if j else {}
                if key.startswith("time/"):
                    extra["stackgroup"] = run.name  # the split of one step's wall time
                traces.append(line(run, i, xs, ys, name) | extra)
    cid = "m-" + title.replace("/", "-").replace(" ", "-")
    return chart(cid, section_of(keys[0]), title, traces)


def env_steps_per_s(run: RunData) -> tuple[list, list]:
    """Env steps per second of rollout: the step's new env steps / `time/rollout_s`."""
    xs, ys, prev = [], [], 0.0
    for r in run.metrics:
        total, secs = r.get("train/env_steps"), r.get("time/rollout_s")
        if isinstance(total, int | float) and isinstance(secs, int | float) and secs > 0:
            xs.append(r["step"])
            ys.append((total - prev) / secs)
            prev = total
    return xs, ys


def build_charts(runs: list[RunData], max_points: int = 400) -> list[dict[str, Any]]:
    """Every chart of the report, in page order (see the module docstring)."""
    charts = [success_chart(runs, max_points)]
    keys = [k for k in metric_keys(runs) if not k.startswith(EVAL_PREFIXES)]
    if "train/success" in keys:
        charts.append(metric_chart(runs, ["train/success"], "training success", max_points))
        charts[-1]["section"] = "Success"
    done = {"train/success"}
    for prefix, title in COMBINED.items():
        group = [k for k in keys if k.startswith(prefix)]
        if group:
            charts.append(metric_chart(runs, group, title, max_points))
            done.update(group)
    sps = []
    for i, run in enumerate(runs):
        xs, ys = thin(*env_steps_per_s(run), max_points)
        if xs:
            sps.append(line(run, i, xs, ys, f"{run.name}: env steps/s"))
    if sps:
        charts.append(chart("m-env-steps-per-s", "Throughput", "env steps / s (rollout)", sps))
    charts += [metric_chart(runs, [k], k, max_points) for k in keys if k not in done]
    order = ["Success", "Rewards", "Diagnostics", "Throughput", "SFT", "Off-policy and mismatch"]
    return sorted(charts, key=lambda c: order.index(c["section"]))
