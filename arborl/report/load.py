"""Read what a run directory holds, tolerating a run that crashed half-way.

A run dir (`runs/<name>/`, see `arborl.train.runlog`) may lack any of its files: a run
killed during SFT has a config and a few metrics, one killed mid-RL has no summary. Every
reader here returns what exists (empty when a file is missing, a torn last JSONL line
skipped), so `arborl report` on a partial run shows its partial story. Only a directory
with none of the files a run writes is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from arborl.report.baselines import read_baselines

RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json")
STEP_FILE = re.compile(r"step-(\d+)\.jsonl$")


@dataclass
class RunData:
    """Everything the report shows about one run (plain JSON-able values)."""

    path: Path
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    eval_episodes: dict[int, list[dict]] = field(default_factory=dict)
    """Evaluation step -> sampled held-out episodes (`eval_episodes/step-N.jsonl`)."""
    train_episodes: dict[int, list[dict]] = field(default_factory=dict)
    """RL step -> sampled training episodes (`trajectories/step-N.jsonl`)."""
    trees: dict[str, str] = field(default_factory=dict)
    """File name -> HTML of a search tree view (`trees/*.html`)."""
    baselines: dict[str, dict] = field(default_factory=dict)
    """Baseline policy name -> its `arborl eval` row (`baselines.json`)."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file; a torn line (a killed writer) is skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def read_step_files(folder: Path, max_files: int, per_file: int) -> dict[int, list[dict]]:
    """`folder/step-N.jsonl` files -> {N: first `per_file` records}. Of many files, the
    first, the last and evenly spaced ones between (`max_files` in all) are kept, so a
    long run's page stays small."""
    if not folder.is_dir():
        return {}
    files = sorted(
        (int(m.group(1)), p) for p in folder.iterdir() if (m := STEP_FILE.search(p.name))
    )
    return {step: read_jsonl(p)[:per_file] for step, p in spread(files, max_files)}


def spread(items: list, k: int) -> list:
    """At most `k` of `items`: the first, the last and evenly spaced ones between."""
    if len(items) <= k:
        return list(items)
    if k <= 1:
        return items[-1:]
    idx = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)})
    return [items[i] for i in idx]


def load_run(path: str | Path, max_points_files: int = 6, per_file: int = 16) -> RunData:
    """Read run dir `path` (see the module docstring). `max_points_files` evaluation (and
    training) points keep `per_file` episodes each."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"run dir {str(path)!r} does not exist; give a runs/<name> folder")
    if not any((path / f).exists() for f in RUN_FILES):
        raise FileNotFoundError(
            f"{str(path)!r} holds none of {list(RUN_FILES)}: not a run dir of `arborl train` "
            "or `arborl sft` (give runs/<name>)"
        )
    run = RunData(path=path, name=path.name)
    if (path / "config.yaml").exists():
        run.config = yaml.safe_load((path / "config.yaml").read_text()) or {}
    if (path / "metrics.jsonl").exists():
        run.metrics = read_jsonl(path / "metrics.jsonl")
    if (path / "summary.json").exists():
        run.summary = json.loads((path / "summary.json").read_text())
    run.baselines = read_baselines(path)
    run.eval_episodes = read_step_files(path / "eval_episodes", max_points_files, per_file)
    run.train_episodes = read_step_files(path / "trajectories", max_points_files, per_file)
    run.trees = tree_pages(path, run.train_episodes)
    return run


def tree_pages(path: Path, train_episodes: dict[int, list[dict]], max_trees: int = 4) -> dict:
    """{title: HTML} of the search trees of a tree-rollout run (`arborl.search.html`): the
    tree a training record carries in `meta.search_tree` (taken out of the record), and
    any `trees/*.html` page; at most `max_trees`, evenly spread over the run."""
    from arborl.search.html import render_html

    found = []
    for step, records in sorted(train_episodes.items()):
        for r in records:
            doc = (r.get("meta") or {}).pop("search_tree", None)
            if doc is not None:
                title = f"step {step}, task {r.get('task_id', '')}"
                found.append((title, lambda doc=doc, title=title: render_html(doc, title)))
    if (path / "trees").is_dir():
        found += [(p.name, p.read_text) for p in sorted((path / "trees").glob("*.html"))]
    return {title: page() for title, page in spread(found, max_trees)}
