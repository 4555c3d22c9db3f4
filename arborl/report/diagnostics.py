"""The diagnostics of several runs side by side (`arborl report A B`): beside success,
what tells whether a run could learn at all, first and last RL step: the policy's entropy
(`actor/entropy`), the share of task groups with a learning signal
(`adv/groups_with_signal`), the share of rows trained on (`train/rows_with_signal`), and
the episodes that errored (`rollout/env_errors` summed over RL steps, and the run's
"N of M" from `summary.json["failures"]`). A metric a run never logged shows as "-" (an
update that had no rows logs no entropy)."""

from __future__ import annotations

import html

from arborl.report.charts import series
from arborl.report.load import RunData

FIRST_LAST = (
    ("actor/entropy", "entropy"),
    ("adv/groups_with_signal", "groups with signal"),
    ("train/rows_with_signal", "rows with signal"),
)
"""(metric, column) shown as its first -> last RL-step value."""


def first_last(run: RunData, key: str) -> str:
    """ "a → b" of `key`'s first and last logged values, "a" for one, "-" for none."""
    _, ys = series(run, key)
    if not ys:
        return "-"
    return f"{ys[0]:.3f}" if len(ys) == 1 else f"{ys[0]:.3f} → {ys[-1]:.3f}"


def errored(run: RunData) -> str:
    """Errored episodes: "N of M" over the whole run when its summary has them, else the
    RL steps' `rollout/env_errors` summed."""
    failures = (run.summary or {}).get("failures") or {}
    if "total_episodes" in failures:
        return f"{failures['total_errored']} of {failures['total_episodes']}"
    _, ys = series(run, "rollout/env_errors")
    return f"{int(sum(ys))} (RL)" if ys else "-"


def diagnostics_table(runs: list[RunData]) -> str:
    """The runs' diagnostics as an HTML table (one row per run)."""
    head = "<tr><th>run</th>" + "".join(f"<th>{c} (first → last)</th>" for _, c in FIRST_LAST)
    rows = [head + "<th>episodes errored</th></tr>"]
    for run in runs:
        cells = [html.escape(run.name)] + [first_last(run, k) for k, _ in FIRST_LAST]
        cells.append(errored(run))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return '<table class="runs" id="diagnostics-table">' + "".join(rows) + "</table>"
