"""Several runs as arms x seeds: gains over the start, paired differences between arms,
training curves. What `arborl compare` writes and `arborl report` shows for several runs.

A run is one cell of a grid: its *arm* (what it tries: an algorithm, a learning rate, any
set of overrides) and its *seed*. Runs of one seed start from the same policy and are
evaluated on the same held-out tasks with the same sampling seed (`eval.seed`), so:

- an arm's **gain** over its start is the mean over seeds of each run's after - before,
  with a Student-t 95% interval over seeds (`arborl.report.stats`). Seeds are the unit of
  replication: the spread between training seeds is what a second try meets. A run's own
  paired interval over tasks (`summary.json`'s `gain`) measures only its evaluation's
  noise; it stays in the table of runs.
- two arms **differ** per seed by their held-out success after RL (same start, same
  tasks): the mean of those differences with a t interval over seeds, and on how many
  seeds the first was ahead.

A pair of runs counts only when they share the start and `EVAL_KEYS`; a seed that breaks
this is left out of that pair, with the reason. `arborl compare` writes `CELL_FILE` into
each run (its arm and seed); runs without one (`arborl report runs/a runs/b`) take their
seed from `trainer.seed` and their arm from the config keys that differ between them.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from itertools import combinations
from typing import Any

from arborl.report.charts import PALETTE, chart, eval_points, series
from arborl.report.episodes import flatten
from arborl.report.load import RunData
from arborl.report.stats import mean_interval

CELL_FILE = "compare_cell.json"
"""Written by `arborl compare` into each run folder: {"arm", "seed", "kind", "settings",
"start"} (what the cell is, and the settings it was run with, for resuming a grid)."""
SEED_KEYS = ("trainer.seed", "model.seed", "sft.seed")
"""The seeds a grid's seed sets in every run (tasks, sampling, batch order, weight init)."""
EVAL_KEYS = (
    "env.id", "env.kwargs", "env.eval_split", "eval.seed", "eval.num_episodes",
    "eval.temperature", "eval.chunk_episodes",
)  # fmt: skip
"""Settings that decide the held-out tasks and how they are sampled: two runs that differ
in one are not evaluated on the same episodes, so they are not paired."""
BOOKKEEPING = (
    "trainer.name", "trainer.output_dir", "trainer.resume", "trainer.progress",
    "trainer.plots", "trainer.report", "trainer.loggers", "trainer.save_every",
    "trainer.keep_checkpoints", "trainer.save_trajectories", "trainer.num_threads",
    "eval.every", "eval.every_episodes", "eval.save_episodes",
)  # fmt: skip
"""Settings that change what a run writes, not what it learns (never an arm's difference)."""
DIAGNOSTICS = (
    "actor/entropy", "rollout/groups_mixed", "adv/groups_with_signal", "reward/std",
    "gigpo/shared_anchor_frac", "gigpo/mean_anchor_group_size",
)  # fmt: skip
"""Per-step metrics averaged over a run's RL steps: entropy and the groups with a signal
warn of stalls; the anchor statistics say whether states recur within a group, which
GiGPO's step term needs (each exists only where the run logs it)."""
WINDOW = 10
"""RL steps per window of the training-success trend (first, middle, last)."""


def _under(key: str, names: tuple[str, ...]) -> bool:
    return any(key == n or key.startswith(n + ".") for n in names)


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table (floats with 3 decimals), also readable in a terminal."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# --- reading runs ------------------------------------------------------------------------
def read_cell(run: RunData) -> dict | None:
    """The run's `CELL_FILE` (None when `arborl compare` did not make it)."""
    path = run.path / CELL_FILE
    return json.loads(path.read_text()) if path.exists() else None


def label_runs(runs: list[RunData]) -> list[tuple[str, int]]:
    """(arm, seed) of each run: from its `CELL_FILE`, else seed = `trainer.seed` and arm =
    its values of the config keys that differ between those runs (seeds, the start and
    `BOOKKEEPING` aside). Runs that still share an arm and a seed are each their own arm."""
    cells = [read_cell(r) for r in runs]
    bare = [i for i, c in enumerate(cells) if c is None]
    flat = {i: flatten(runs[i].config) for i in bare}
    keys = sorted({k for f in flat.values() for k in f})
    ignored = (*SEED_KEYS, *BOOKKEEPING, "model.name_or_path")
    differ = [
        k
        for k in keys
        if not _under(k, ignored) and len({repr(f.get(k)) for f in flat.values()}) > 1
    ]
    labels = {}
    for i in bare:
        arm = " ".join(f"{k}={json.dumps(flat[i].get(k))}" for k in differ) or "(one config)"
        labels[i] = (arm, int(flat[i].get("trainer.seed", 0)))
    if len(set(labels.values())) < len(labels):
        labels = {i: (runs[i].name, seed) for i, (_, seed) in labels.items()}
    return [(c["arm"], int(c["seed"])) if c else labels[i] for i, c in enumerate(cells)]


def start_of(config: dict) -> str:
    """What a run starts RL from: its own SFT (then the settings that make it) or the
    policy it loads."""
    flat = flatten(config)
    if flat.get("sft.enabled", True) and flat.get("sft.steps", 1):
        own = {k: v for k, v in flat.items() if k.startswith("sft.") or k.startswith("model.")}
        return "own SFT " + json.dumps(own, sort_keys=True)
    return str(flat.get("model.name_or_path"))


def eval_identity(config: dict) -> str:
    flat = flatten(config)
    return json.dumps({k: v for k, v in flat.items() if _under(k, EVAL_KEYS)}, sort_keys=True)


def evaluation(run: RunData, prefix: str, step: int | None = None) -> dict | None:
    """success, its interval and episodes of the run's evaluation logged under `prefix`
    ("eval/" at `step` 0: before RL; "eval/final_": after), as metrics.jsonl holds it
    (a summary.json says the same, but a run still going has none)."""
    recs = [r for r in run.metrics if f"{prefix}success" in r]
    recs = [r for r in recs if step is None or r.get("step") == step]
    if not recs:
        return None
    keys = ("success", "success_lo", "success_hi", "episodes")
    return {k: recs[-1][f"{prefix}{k}"] for k in keys if f"{prefix}{k}" in recs[-1]}


def train_windows(success: list[float]) -> dict[str, float]:
    """Mean training success of a run's first, middle and last `WINDOW` RL steps."""
    if not success:
        return {}
    mid = max(0, len(success) // 2 - WINDOW // 2)
    parts = {"first": success[:WINDOW], "middle": success[mid : mid + WINDOW]}
    parts["last"] = success[-WINDOW:]
    return {k: statistics.fmean(v) for k, v in parts.items()}


def run_row(run: RunData, arm: str, seed: int) -> dict[str, Any]:
    """One run's line of the comparison: success before and after RL, its paired gain over
    tasks, budget used, diagnostics, its training curve and evaluations. A run still
    going has `after` None and its curve so far."""
    s = run.summary or {}
    evals = [
        {"step": p[0], "success": p[1], "success_lo": p[2], "success_hi": p[3]}
        for p in eval_points(run)
    ]
    steps, success = series(run, "train/success")
    task_gain = s.get("gain") or {}
    diag = {}
    for key in DIAGNOSTICS:
        vals = [r[key] for r in run.metrics if "train/success" in r and r.get(key) is not None]
        if vals:
            diag[key] = statistics.fmean(vals)
    return {
        "run": run.name,
        "path": str(run.path),
        "arm": arm,
        "seed": seed,
        "finished": run.summary is not None,
        "start": start_of(run.config),
        "eval": eval_identity(run.config),
        "before": evaluation(run, "eval/", step=0),
        "after": evaluation(run, "eval/final_"),
        "gain": task_gain.get("gain"),
        "gain_lo": task_gain.get("gain_lo"),
        "gain_hi": task_gain.get("gain_hi"),
        "steps": s.get("steps", len(success)),
        "env_steps": s.get("env_steps"),
        "wall_s": s.get("wall_s"),
        "diagnostics": diag,
        "train_windows": train_windows(success),
        "curve": {"step": steps, "train/success": success},
        "evals": evals,
    }


# --- the tables --------------------------------------------------------------------------
def arm_gains(rows: list[dict], arms: list[str], level: float = 0.95) -> list[dict]:
    """Per arm, over its finished runs: the mean success at the start and after RL, each
    seed's gain (after - before on the same tasks), their mean `gain` with the t interval
    `gain_lo`/`gain_hi` over seeds, and on how many seeds the arm gained."""
    out = []
    for arm in arms:
        rs = [r for r in rows if r["arm"] == arm and r["after"] and r["before"]]
        gains = [r["after"]["success"] - r["before"]["success"] for r in rs]
        gain, lo, hi = mean_interval(gains, level)
        out.append(
            {
                "arm": arm,
                "seeds": [r["seed"] for r in rs],
                "gains": gains,
                "start_success": statistics.fmean(r["before"]["success"] for r in rs)
                if rs
                else math.nan,
                "success": statistics.fmean(r["after"]["success"] for r in rs) if rs else math.nan,
                "gain": gain,
                "gain_lo": lo,
                "gain_hi": hi,
                "seeds_gained": sum(g > 0 for g in gains),
            }
        )
    return out


def paired_differences(
    rows: list[dict], pairs: list[tuple[str, str]], level: float = 0.95
) -> list[dict]:
    """Per (a, b) of `pairs`: held-out success after RL of a minus b on each seed both
    finished (`diffs`), their mean `diff` with the t interval `diff_lo`/`diff_hi` over
    seeds, and `seeds_ahead`: on how many a was ahead. Rows are {"arm", "seed", "after":
    {"success"}} (or a flat "success"); a seed whose two rows carry different "start" or
    "eval" is left out (`left_out`, with the reason)."""

    def success(r: dict) -> float | None:
        return r["after"]["success"] if r.get("after") else r.get("success")

    by = {(r["arm"], r["seed"]): r for r in rows if success(r) is not None}
    out = []
    for a, b in pairs:
        seeds = sorted({s for (x, s) in by if x == a} & {s for (x, s) in by if x == b})
        kept, left_out = [], []
        for s in seeds:
            ra, rb = by[(a, s)], by[(b, s)]
            why = [k for k in ("start", "eval") if ra.get(k) != rb.get(k)]
            if why:
                left_out.append({"seed": s, "reason": f"different {' and '.join(why)}"})
            else:
                kept.append(s)
        diffs = [success(by[(a, s)]) - success(by[(b, s)]) for s in kept]
        diff, lo, hi = mean_interval(diffs, level)
        out.append(
            {
                "a": a,
                "b": b,
                "seeds": kept,
                "diffs": diffs,
                "diff": diff,
                "diff_lo": lo,
                "diff_hi": hi,
                "seeds_ahead": sum(d > 0 for d in diffs),
                "left_out": left_out,
            }
        )
    return out


def arm_curves(rows: list[dict], arms: list[str]) -> dict[str, dict]:
    """Per arm: mean training success over its runs at each RL step all of them reached,
    mean held-out success at each evaluation step all of them ran, and the mean of each
    `train_windows` window."""
    out = {}
    for arm in arms:
        rs = [r for r in rows if r["arm"] == arm]
        curves = [dict(zip(r["curve"]["step"], r["curve"]["train/success"])) for r in rs]
        evals = [{e["step"]: e["success"] for e in r["evals"]} for r in rs]

        def mean_at(maps: list[dict]) -> tuple[list, list]:
            common = sorted(set.intersection(*(set(m) for m in maps))) if maps else []
            return common, [statistics.fmean(m[k] for m in maps) for k in common]

        steps, success = mean_at(curves)
        eval_steps, eval_success = mean_at(evals)
        windows = [r["train_windows"] for r in rs if r["train_windows"]]
        out[arm] = {
            "step": steps,
            "train/success": success,
            "eval_step": eval_steps,
            "eval/success": eval_success,
            "train_windows": {k: statistics.fmean(w[k] for w in windows) for k in windows[0]}
            if windows
            else {},
        }
    return out


def compare_runs(
    runs: list[RunData], pairs: list[tuple[str, str]] | None = None, level: float = 0.95
) -> dict[str, Any]:
    """The comparison of `runs` (see the module docstring): {"arms": `arm_gains`,
    "paired": `paired_differences` (default `pairs`: every two arms, later minus
    earlier), "runs": `run_row`s, "curves": `arm_curves`, "level"}."""
    rows = [run_row(run, arm, seed) for run, (arm, seed) in zip(runs, label_runs(runs))]
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    pairs = pairs if pairs is not None else [(b, a) for a, b in combinations(arms, 2)]
    return {
        "level": level,
        "arms": arm_gains(rows, arms, level),
        "paired": paired_differences(rows, pairs, level),
        "runs": rows,
        "curves": arm_curves(rows, arms),
    }


# --- text and HTML -----------------------------------------------------------------------
def _ci(mean: float | None, lo: float | None, hi: float | None) -> str:
    if mean is None or math.isnan(mean):
        return "-"
    if lo is None or math.isnan(lo):
        return f"{mean:+.3f}"
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _succ(d: dict | None) -> str:
    return f"{d['success']:.3f} [{d['success_lo']:.3f}, {d['success_hi']:.3f}]" if d else "-"


Table = tuple[str, list[str], list[list[str]]]  # (title, headers, rows of text)


def comparison_tables(result: dict) -> list[Table]:
    """(title, headers, rows of text) of each table of a `compare_runs` result."""
    pct = f"{round(result['level'] * 100)}%"
    return [
        _arm_table(result, pct),
        _pair_table(result, pct),
        _run_table(result),
        _curve_table(result),
    ]


def _arm_table(result: dict, pct: str) -> Table:
    rows = [
        [
            a["arm"],
            str(len(a["seeds"])),
            f"{a['start_success']:.3f}",
            f"{a['success']:.3f}",
            _ci(a["gain"], a["gain_lo"], a["gain_hi"]),
            " ".join(f"{g:+.3f}" for g in a["gains"]),
            f"{a['seeds_gained']} of {len(a['seeds'])}",
        ]
        for a in result["arms"]
        if a["seeds"]
    ]
    title = f"gain over the start (mean over seeds, {pct} t interval over seeds)"
    headers = ["arm", "seeds", "before RL", "after RL", f"gain [{pct} CI]", "gain per seed"]
    return title, [*headers, "gained on"], rows


def _pair_table(result: dict, pct: str) -> Table:
    rows = [
        [
            f"{d['a']} - {d['b']}",
            " ".join(f"{x:+.3f}" for x in d["diffs"]) or "-",
            _ci(d["diff"], d["diff_lo"], d["diff_hi"]),
            f"{d['seeds_ahead']} of {len(d['seeds'])} seeds"
            + "".join(f"; seed {x['seed']} left out: {x['reason']}" for x in d["left_out"]),
        ]
        for d in result["paired"]
    ] or [["(one arm: nothing to pair)", "-", "-", "-"]]
    title = (
        f"paired differences after RL (same start and held-out tasks per seed; {pct} t "
        "interval over seeds)"
    )
    return title, ["a - b", "per seed", f"mean [{pct} CI]", "a ahead on"], rows


def _run_table(result: dict) -> Table:
    rows = [
        [
            r["run"],
            r["arm"],
            str(r["seed"]),
            _succ(r["before"]),
            _succ(r["after"]) if r["finished"] else "(not finished)",
            _ci(r["gain"], r["gain_lo"], r["gain_hi"]),
            str(r["steps"]),
            str(r["env_steps"] if r["env_steps"] is not None else "-"),
            str(r["wall_s"] if r["wall_s"] is not None else "-"),
        ]
        for r in result["runs"]
    ]
    headers = ["run", "arm", "seed", "before RL", "after RL", "gain [95% CI, tasks]"]
    title = "runs (gain: paired over the held-out tasks of that run)"
    return title, [*headers, "RL steps", "env steps", "wall s"], rows


def _curve_table(result: dict) -> Table:
    rows = []
    for arm, c in result["curves"].items():
        w = c["train_windows"]
        held = ", ".join(f"{s}: {v:.3f}" for s, v in zip(c["eval_step"], c["eval/success"]))
        windows = (f"{w[k]:.3f}" if k in w else "-" for k in ("first", "middle", "last"))
        rows.append([arm, *windows, held or "-"])
    title = (
        f"training curves (mean over seeds: training success in the first, middle and last "
        f"{WINDOW} RL steps; held-out success by step)"
    )
    return title, ["arm", "first", "middle", "last", "held-out by step"], rows


def format_comparison(result: dict) -> str:
    """The tables of `comparison_tables` as Markdown."""
    return "\n\n".join(
        f"{title}\n\n{format_table(headers, rows)}"
        for title, headers, rows in comparison_tables(result)
    )


def comparison_html(result: dict) -> str:
    """The tables of `comparison_tables` as HTML (the report's Comparison section)."""
    parts = []
    for title, headers, rows in comparison_tables(result):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
        )
        parts.append(
            f'<p>{html.escape(title)}</p><table class="runs"><tr>{head}</tr>{body}</table>'
        )
    return '<div id="comparison">' + "".join(parts) + "</div>"


def comparison_chart(result: dict) -> dict[str, Any]:
    """The report's chart of each arm's mean training success (solid) and mean held-out
    success (dashed, markers) over the RL steps all its runs reached."""
    traces = []
    for i, (arm, c) in enumerate(result["curves"].items()):
        color = {"color": PALETTE[i % len(PALETTE)]}
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": c["step"],
                "y": c["train/success"],
                "name": f"{arm}: training",
                "line": color,
            }
        )
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": c["eval_step"],
                "y": c["eval/success"],
                "name": f"{arm}: held-out",
                "line": {**color, "dash": "dash"},
            }
        )
    return chart("comparison", "Comparison", "success by arm (mean over seeds)", traces)
