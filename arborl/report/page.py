"""The report page: one self-contained HTML file (Plotly, styles and data inlined).

The page needs no network and no server: Plotly's basic bundle (vendored under
`arborl/report/vendor/`, see its README) and `report.js` are inlined after the data, a
JSON block that `report.js` turns into charts and the episode browser. Tables that need
no interaction (runs, config) are rendered here in Python.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import yaml

from arborl.htmldata import script_json
from arborl.report.charts import build_charts, eval_points
from arborl.report.compare import compare_runs, comparison_chart, comparison_html
from arborl.report.diagnostics import diagnostics_table
from arborl.report.episodes import build_episodes, config_diff, pairs
from arborl.report.load import RunData

HERE = Path(__file__).parent
PLOTLY = HERE / "vendor" / "plotly-basic.min.js"


def runs_table(runs: list[RunData]) -> str:
    """One row per run: status, steps, held-out success before and after, wall time."""
    head = "<tr><th>run</th><th>status</th><th>env</th><th>algo</th><th>steps</th>"
    head += "<th>held-out success (first → last)</th><th>wall</th></tr>"
    rows = [head]
    for run in runs:
        s, pts = run.summary or {}, eval_points(run)
        status = "finished" if run.summary else '<span class="partial">partial</span>'
        failures = s.get("failures") or {}
        if failures.get("verdict"):
            status = '<span class="partial">finished, learned nothing</span>'
        if failures.get("total_errored"):
            status += (
                f'<br><span class="partial">{failures["total_errored"]} of '
                f"{failures['total_episodes']} episodes errored</span>"
            )
        steps = s.get("steps", max((r.get("step", 0) for r in run.metrics), default=0))
        succ = " → ".join(f"{p[1]:.3f} [{p[2]:.3f}, {p[3]:.3f}]" for p in (pts[:1] + pts[-1:]))
        wall = f"{s['wall_s']} s" if "wall_s" in s else "-"
        cells = [
            html.escape(run.name),
            status,
            html.escape(str(run.config.get("env", {}).get("id", "-"))),
            html.escape(str(run.config.get("algo", {}).get("name", "-"))),
            str(steps),
            succ if len(pts) > 1 else (succ or "-"),
            wall,
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return '<table class="runs">' + "".join(rows) + "</table>"


def failures_html(runs: list[RunData]) -> str:
    """One line per run whose episodes errored: "N of M episodes errored (...; first
    error: ...)", and for a run that learned nothing, why and what to change
    (`summary.json["failures"]`, `arborl.train.failures`)."""
    from arborl.report.failures import errored_line, verdict_line

    out = []
    for run in runs:
        failures = (run.summary or {}).get("failures") or {}
        lines = [x for x in (errored_line(failures), verdict_line(failures)) if x]
        if lines:
            text = "<br>".join(html.escape(x) for x in lines)
            out.append(f'<p class="run-errors"><b>{html.escape(run.name)}</b>: {text}</p>')
    return "".join(out)


def config_section(runs: list[RunData]) -> str:
    """The resolved config of one run, or the keys that differ between several."""
    if len(runs) == 1:
        text = yaml.safe_dump(runs[0].config, sort_keys=False) if runs[0].config else "(none)"
        return f'<pre class="config" id="config">{html.escape(text)}</pre>'
    diff = config_diff(runs)
    if not diff:
        return '<p id="config-diff">The runs have identical configs.</p>'
    head = "<tr><th>key</th>" + "".join(f"<th>{html.escape(r.name)}</th>" for r in runs)
    rows = [head + "</tr>"]
    for d in diff:
        cells = "".join(f"<td>{html.escape(json.dumps(v))}</td>" for v in d["values"])
        rows.append(f"<tr><td><code>{html.escape(d['key'])}</code></td>{cells}</tr>")
    return '<table class="diff" id="config-diff">' + "".join(rows) + "</table>"


def render_report(runs: list[RunData], max_points: int = 400, page_size: int = 20) -> str:
    """The HTML of the report of `runs` (see the module docstring)."""
    episodes = build_episodes(runs)
    charts, comparison = build_charts(runs, max_points), ""
    if len(runs) > 1:  # arms x seeds, paired: the table `arborl compare` prints
        result = compare_runs(runs)
        charts.insert(0, comparison_chart(result))
        comparison = '<h2 id="comparison-h">Comparison of arms</h2>' + comparison_html(result)
        comparison += '<h3 id="diagnostics-h">Diagnostics of the runs</h3>'
        comparison += diagnostics_table(runs)
    data = {
        "charts": charts,
        "episodes": episodes,
        "pairs": pairs(episodes),
        "trees": [{"run": r.name, "name": n, "html": h} for r in runs for n, h in r.trees.items()],
        "page_size": page_size,
    }
    title = "arborl report: " + ", ".join(r.name for r in runs)
    return _PAGE.format(
        title=html.escape(title),
        css=(HERE / "report.css").read_text(),
        runs=runs_table(runs) + failures_html(runs),
        comparison=comparison,
        trees='<h2 id="trees-h">Search trees</h2>\n<div id="trees"></div>' if data["trees"] else "",
        config_title="Resolved config" if len(runs) == 1 else "Config differences",
        config=config_section(runs),
        data=script_json(data),
        plotly=PLOTLY.read_text(),
        js=(HERE / "report.js").read_text(),
    )


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>{css}</style></head><body>
<h1>{title}</h1>
<nav id="nav"></nav>
{runs}
{comparison}
<div id="charts"></div>
<h2 id="episodes">Episodes</h2>
<div class="filters">
 <label>outcome <select id="f-outcome"><option value="all">all</option>
  <option value="won">won</option><option value="lost">lost</option></select></label>
 <label>task <select id="f-task"><option value="all">all</option></select></label>
 <label>point <select id="f-point"><option value="all">all</option></select></label>
 <button id="prev">&larr; prev</button><button id="next">next &rarr;</button>
 <span id="episode-count" class="muted"></span>
</div>
<div id="episode-list"></div>
<h3>Same task before and after RL (first and last held-out evaluation)</h3>
<p id="pair-count" class="muted"></p>
<div id="pair-list"></div>
{trees}
<h2 id="config-h">{config_title}</h2>
{config}
<script type="application/json" id="report-data">{data}</script>
<script>{plotly}</script>
<script>{js}</script>
</body></html>
"""
