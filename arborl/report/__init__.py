"""`report.html`: a self-contained page of one run or several overlaid (curves, diagnostics,
throughput, readable episodes, search trees, config) — what `arborl report` and the
trainers write.

    from arborl.report import write_report
    write_report(["runs/a", "runs/b"], "compare.html")

Reading (`load`), charts (`charts`), episodes (`episodes`), baselines (`baselines`) and the
page (`page`) are separate so that each is tested without a browser; the page itself is
checked in headless Chromium (tests/report/test_browser.py).
"""

from __future__ import annotations

from pathlib import Path

from arborl.report.baselines import ensure_baselines
from arborl.report.load import load_run
from arborl.report.page import render_report

__all__ = ["load_run", "render_report", "write_report"]


def write_report(
    run_dirs: list[str | Path],
    out: str | Path | None = None,
    baselines: bool = True,
    max_points: int = 400,
    episodes_per_point: int = 16,
) -> Path:
    """Write the report of `run_dirs` to `out` (default: `report.html` in the only run dir;
    required for several) atomically, and return its path. `baselines`: compute a run's
    random/oracle lines when its `baselines.json` is missing (cached there)."""
    if not run_dirs:
        raise ValueError("write_report needs at least one run dir")
    if out is None:
        if len(run_dirs) > 1:
            raise ValueError(
                f"{len(run_dirs)} run dirs need an output file: pass out= (--out FILE)"
            )
        out = Path(run_dirs[0]) / "report.html"
    runs = [load_run(d, per_file=episodes_per_point) for d in run_dirs]
    if baselines:
        for run in runs:
            run.baselines = ensure_baselines(run.path, run.config)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_report(runs, max_points=max_points))
    tmp.replace(out)  # a browser refreshing mid-run never reads a half-written page
    return out
