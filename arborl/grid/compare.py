"""`arborl compare`: a grid of runs (arms x seeds) run, resumed or collected, then compared.

An arm is a list of `arborl train` overrides (an algorithm, a learning rate, scoring vs
generating); a seed sets `trainer.seed`, `model.seed` and `sft.seed` of every run. Per
seed, every arm starts RL from the same policy (one `arborl sft` run of that seed,
`sft-s<seed>/`, or one given policy for all seeds) and every run is evaluated on the same
held-out tasks with the same sampling seed (`eval.seed`), so gains and differences are
paired. (start=own lets each run train its own SFT warm start, for arms that change SFT:
arms with the same SFT settings still share a start, the others are paired only with
their own start.) Overrides that would break the pairing are refused before any work. The numbers
(gains with t intervals over seeds, paired differences, curves) are
`arborl.report.compare`'s; this module owns the grid, and `jobs` how a cell runs:
in this process, one after another, or (`jobs` > 1) as up to that many child processes
at once, each RL cell after its seed's SFT start.

Resuming: each run folder gets `compare_cell.json` (arm, seed, settings) before its run
starts, and running the grid again
- collects a run whose folder has a summary.json and the same settings (never reruns it);
- resumes an RL run that stopped half-way with `trainer.resume=auto`, from its newest
  checkpoint that verifies (the checkpoint holds the before-RL evaluation, so the gain
  stays paired); one without such a checkpoint, and an unfinished SFT start, start over;
- reruns the RL runs of a seed whose SFT start is (re)trained: their start changed (an RL
  run records which start it began from, `START_FILE`, so a start retrained by an earlier
  call that stopped before the RL runs were rerun is caught too);
- leaves alone a folder that another live trainer holds (one compare runs a grid folder
  at a time, `guard.grid_lock`; several cells at once is `jobs` > 1);
- refuses a folder that holds a run of other settings, unless `replace` (rerun that cell,
  deleting the folder) or `fresh` (rerun every cell).
A cell whose child process failed (`jobs` > 1) is left out of the comparison, and so are
the RL cells of a seed whose SFT start failed (not run); the next call reruns them.
`--collect` leaves out ("stale") a finished RL run whose start is no longer the one it
began from: the start is unfinished, or was trained again since.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arborl.config import ConfigError, dump_yaml, to_dict
from arborl.grid.guard import grid_lock, read_cell_json
from arborl.grid.jobs import Job, run_cell, run_jobs
from arborl.report.compare import CELL_FILE, EVAL_KEYS, SEED_KEYS

GRID_KEYS = (*SEED_KEYS, "trainer.name", "trainer.output_dir", "trainer.resume", "sft.enabled")
"""Settings the grid sets in every run itself (no arm, `base` or `sft` may)."""
ARM_KEYS_REFUSED = (*EVAL_KEYS, "model.name_or_path")
"""Settings an arm may not change: the held-out tasks and their sampling, and the model
the start is made from, are what all arms of a seed share (and `sft.*` too, unless each run
trains its own start: start=own)."""
LEFT = {
    "busy": ": another process trains it",
    "blocked": ": its SFT start is still being trained by another process",
}
LEFT_ALONE = ("done", "busy", "blocked")
"""Statuses of the cells a call does not run (collected as they are)."""
START_FILE = "compare_start.json"
"""In an RL cell of a grid with SFT starts: the fingerprint of the start it began from
(`start_fingerprint`), checked when the grid is run or collected again."""
NOT_COMPARED = ("conflict", "failed", "skipped", "stale")
"""Statuses of the cells left out of the comparison: a run of other settings, a crashed
run (--jobs N), and a run whose SFT start did not finish (its folder, if any, holds a run
from the old start)."""
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")


@dataclass
class CompareConfig:
    """A grid of runs: every arm on every seed, paired per seed on one start and one set
    of held-out tasks (`arborl compare`, a YAML file of these keys or its flags)."""

    arms: dict[str, list[str]] = field(default_factory=dict)
    """Arm name -> the `arborl train` overrides it tries, e.g. `{grpo: [algo=grpo], gigpo:
    [algo=gigpo, algo.lr=1e-4]}`. An arm may not change the env, the evaluation, the start
    or the SFT (`ARM_KEYS_REFUSED`): those are what it is compared on."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Seeds; each sets `trainer.seed`, `model.seed` and `sft.seed` of its runs."""
    base: list[str] = field(default_factory=list)
    """Overrides every run shares (SFT starts included): the env, the budget, the
    evaluation size, e.g. `[env=sokoban, trainer.max_env_steps=10000,
    eval.num_episodes=200]`."""
    start: str = "sft"
    """What RL starts from: "sft" trains one `arborl sft` run per seed (`base` + `sft`,
    in `sft-s<seed>/`) that every arm of that seed starts from; "own" lets every run
    train its own SFT warm start inside `arborl train` (arms may then change `sft.*`);
    anything else is a policy folder (an SFT checkpoint such as
    `runs/warm/checkpoints/sft/policy`) or a model name that every run starts from."""
    sft: list[str] = field(default_factory=list)
    """Overrides of the SFT starts only, e.g. `[sft.steps=200, sft.num_demos=100]` (with
    start=own, of every run)."""
    out: str = "runs/compare"
    """The grid's folder: a run folder per cell (`<arm>-s<seed>/`, `sft-s<seed>/`),
    `grid.yaml`, `comparison.json`, `comparison.txt` and `report.html`."""
    pairs: list[list[str]] = field(default_factory=list)
    """Arm pairs [a, b] compared per seed (a minus b); empty: every two arms, the later
    one minus the earlier."""
    level: float = field(default=0.95, metadata={"min": 0.5, "max": 0.999})
    """Confidence level of the intervals over seeds."""

    def validate(self, prefix: str = "compare") -> None:
        if not self.arms:
            raise ConfigError(
                f"{prefix}.arms is empty: give at least one, e.g. --arm grpo algo=grpo"
            )
        for name, overrides in self.arms.items():
            if not NAME.match(name) or name == "sft":
                raise ConfigError(
                    f"{prefix}.arms: {name!r} cannot name a run folder; use letters, digits and "
                    "_.+=- (not 'sft', the start runs' name)"
                )
            refused = (*GRID_KEYS, *ARM_KEYS_REFUSED, *(() if self.start == "own" else ("sft",)))
            check_keys(overrides, f"{prefix}.arms.{name}", refused)
            if any(o.split("=", 1)[0].strip() == "env" for o in overrides):
                raise ConfigError(f"{prefix}.arms.{name} selects an env: put env=NAME in base")
        own_model = self.start in ("sft", "own")  # else the start is the model
        refused = GRID_KEYS if own_model else (*GRID_KEYS, "model.name_or_path")
        check_keys(self.base, f"{prefix}.base", refused)
        check_keys(self.sft, f"{prefix}.sft", GRID_KEYS)
        if self.start == "sft":
            check_start_only(self.sft, f"{prefix}.sft")
        if self.sft and not own_model:
            raise ConfigError(
                f"{prefix}.sft={self.sft} but start={self.start!r} trains no SFT: drop them, "
                "or use start=sft (one SFT run per seed) or start=own"
            )
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise ConfigError(f"{prefix}.seeds={self.seeds}: give distinct seeds >= 0")
        for pair in self.pairs:
            if len(pair) != 2 or not set(pair) <= set(self.arms):
                raise ConfigError(
                    f"{prefix}.pairs: {pair} is not two of the arms {list(self.arms)}"
                )


def check_keys(overrides: list[str], path: str, refused: tuple[str, ...]) -> None:
    """Fail naming the first override of `overrides` that sets a key under `refused`."""
    for i, item in enumerate(overrides):
        key = item.split("=", 1)[0].strip()
        hit = next((r for r in refused if key == r or key.startswith(r + ".")), None)
        if hit:
            why = "the grid sets it" if hit in GRID_KEYS else "every arm of a seed shares it"
            if hit == "sft":
                why += ": put it in the grid's sft list, or give each run its own: start=own"
            raise ConfigError(f"{path}[{i}]={item!r}: {hit} is not set here ({why})")


SFT_ONLY_KEYS = ("sft", "model", "trainer")
"""What the sft list may set with start=sft: the SFT runs' own settings, the model they start
from and how they run. Anything else (env, agent, rollout, ...) would reach the SFT starts
but not the RL runs, which would then run with its default."""


def check_start_only(overrides: list[str], path: str) -> None:
    """Fail naming the first override of the sft list that the RL runs would not get."""
    for i, item in enumerate(overrides):
        key = item.split("=", 1)[0].strip()
        if key.split(".", 1)[0] not in SFT_ONLY_KEYS:
            raise ConfigError(
                f"{path}[{i}]={item!r}: the sft list reaches only the SFT starts, so the RL "
                f"runs would not get {key} (they would run with its default); put it in base "
                "(on the command line: before --sft and --arm) so that every run gets it. "
                f"The sft list takes {', '.join(k + '.*' for k in SFT_ONLY_KEYS)}"
            )


@dataclass
class Cell:
    """One run of the grid: an SFT start (`kind` "sft", arm "sft") or an arm's RL run."""

    kind: str
    arm: str
    seed: int
    settings: list[str]
    """The user's overrides for it (`base` + the arm's, or `base` + `sft`)."""

    @property
    def name(self) -> str:
        return f"{self.arm}-s{self.seed}"

    def marker(self, start: str) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "seed": self.seed,
            "kind": self.kind,
            "settings": self.settings,
            "start": start,
        }


def plan_grid(cfg: CompareConfig) -> list[Cell]:
    """The cells in run order: per seed its SFT start (start=sft), then every arm."""
    cells = []
    for seed in cfg.seeds:
        if cfg.start == "sft":
            cells.append(Cell("sft", "sft", seed, [*cfg.base, *cfg.sft]))
        shared = [*cfg.base, *cfg.sft] if cfg.start == "own" else cfg.base
        cells += [Cell("rl", arm, seed, [*shared, *o]) for arm, o in cfg.arms.items()]
    return cells


def cell_overrides(cfg: CompareConfig, cell: Cell) -> list[str]:
    """Everything a cell's run is given: its settings, then the grid's own keys."""
    out = Path(cfg.out)
    own = [f"{k}={cell.seed}" for k in SEED_KEYS]
    own += [f"trainer.output_dir={out}", f"trainer.name={cell.name}"]
    if cell.kind == "rl" and cfg.start != "own":
        start = cfg.start
        if start == "sft":
            start = str(out / f"sft-s{cell.seed}" / "checkpoints" / "sft" / "policy")
        own += [f"model.name_or_path={start}", "sft.enabled=false"]
    return [*cell.settings, *own]


class GridConflict(RuntimeError):
    """A cell's folder holds a run of other settings."""


def cell_status(cfg: CompareConfig, cell: Cell, fresh: bool = False, replace: bool = False) -> str:
    """What a new call does with `cell`: "new" (no folder), "done" (finished, same
    settings: collected), "resume" (RL run with a checkpoint), "rerun" (half-done without
    one, or `fresh`), "busy" (a live trainer holds it: left alone). Raises GridConflict
    when the folder holds a run of other settings, unless `replace` or `fresh` ("rerun")."""
    from arborl.train.checkpoint import latest_checkpoint
    from arborl.train.runlog import lock_holder

    path = Path(cfg.out) / cell.name
    if not path.exists():
        return "new"
    if lock_holder(path):
        return "busy"
    try:
        found = read_cell_json(path / CELL_FILE, GridConflict)
    except GridConflict:  # damaged: rerun it when asked, else say which file and how
        if fresh or replace:
            return "rerun"
        raise
    if found != cell.marker(cfg.start):
        if fresh or replace:
            return "rerun"
        what = f"settings {found}" if found else f"no {CELL_FILE} (not a run of a grid)"
        raise GridConflict(
            f"{path} holds a run with {what}, not {cell.marker(cfg.start)}; move or delete "
            "that folder, give another out folder, rerun such cells with --replace or every "
            "cell with --fresh"
        )
    if fresh:
        return "rerun"
    if (path / "summary.json").exists():
        return "done"
    if cell.kind == "rl" and latest_checkpoint(path) is not None:
        return "resume"
    return "rerun"


def start_fingerprint(cfg: CompareConfig, seed: int) -> str | None:
    """What identifies seed `seed`'s finished SFT start: a hash of its summary.json (the
    SFT's losses and its held-out evaluation, to the last digit) without the paths in it,
    so a start moved to another grid folder keeps it. None when the grid has no SFT starts
    or this one has not finished."""
    summary = Path(cfg.out) / f"sft-s{seed}" / "summary.json"
    if cfg.start != "sft" or not summary.exists():
        return None
    doc = json.loads(summary.read_text())
    kept = {k: v for k, v in doc.items() if k not in ("run_dir", "policy")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def began_from_another_start(cfg: CompareConfig, cell: Cell) -> bool:
    """Whether RL cell `cell` recorded a start (`START_FILE`) that is not its seed's
    start now: unfinished, or trained again since. A run from before `START_FILE`
    existed records none and is taken as it is."""
    recorded = Path(cfg.out) / cell.name / START_FILE
    if cell.kind != "rl" or not recorded.exists():
        return False
    return json.loads(recorded.read_text()).get("sft") != start_fingerprint(cfg, cell.seed)


def plan_statuses(
    cfg: CompareConfig, cells: list[Cell], fresh: bool = False, replace: bool = False
) -> list[str]:
    """`cell_status` of each cell; a seed's RL runs are rerun when its SFT start is
    (re)trained or is not the start they began from, and "blocked" (left for later) while
    another process trains it."""
    status = [cell_status(cfg, c, fresh, replace) for c in cells]
    start = {c.seed: s for c, s in zip(cells, status) if c.kind == "sft"}
    for i, c in enumerate(cells):
        if c.kind != "rl" or status[i] == "busy" or c.seed not in start:
            continue
        if start[c.seed] == "busy":
            status[i] = "blocked"
        elif start[c.seed] in ("new", "rerun") and status[i] != "new":
            status[i] = "rerun"
        elif status[i] in ("done", "resume") and began_from_another_start(cfg, c):
            status[i] = "rerun"
    return status


def collect_statuses(
    cfg: CompareConfig, cells: list[Cell], echo: Callable[[str], None]
) -> list[str]:
    """The statuses `--collect` reads the grid with: `cell_status`, "conflict" for a
    folder of other settings, and "stale" for a finished RL run whose seed's start is
    unfinished or not the one it began from (both left out of the comparison). A seed
    whose start folder is gone (deleted to save space, or not moved with the runs) leaves
    its runs as they are: nothing says they began elsewhere."""
    statuses = []
    for c in cells:
        try:
            statuses.append(cell_status(cfg, c))
        except GridConflict as e:
            echo(f"skipped: {e}")
            statuses.append("conflict")
    start = {c.seed: s for c, s in zip(cells, statuses) if c.kind == "sft"}
    for i, c in enumerate(cells):
        if c.kind != "rl" or statuses[i] != "done" or start.get(c.seed, "new") == "new":
            continue
        if start[c.seed] != "done" or began_from_another_start(cfg, c):
            why = "unfinished" if start[c.seed] != "done" else "trained again since it began"
            echo(f"skipped: {c.name}: its SFT start sft-s{c.seed} is {why}; run the grid again")
            statuses[i] = "stale"
    return statuses


def start_cell(
    cfg: CompareConfig, cell: Cell, status: str, echo: Callable[[str], None]
) -> list[str]:
    """Ready `cell`'s folder for its run and print its start line: a "rerun" deletes the
    folder, a "resume" continues it with `trainer.resume=auto`, and the marker is written
    before the run starts. Returns the run's overrides."""
    overrides = cell_overrides(cfg, cell)
    path = Path(cfg.out) / cell.name
    if status == "rerun":
        shutil.rmtree(path)
    if status == "resume":
        overrides.append("trainer.resume=auto")
    path.mkdir(parents=True, exist_ok=True)
    (path / CELL_FILE).write_text(json.dumps(cell.marker(cfg.start)))
    start = start_fingerprint(cfg, cell.seed) if cell.kind == "rl" else None
    if start is not None:  # a resume keeps the start it began from: plan_statuses checked
        (path / START_FILE).write_text(json.dumps({"sft": start}))
    command = "sft" if cell.kind == "sft" else "train"
    echo(f"[{cell.name}] {status}: arborl {command} {shlex.join(overrides)}")
    return overrides


def run_here(cfg: CompareConfig, cell: Cell, status: str, echo: Callable[[str], None]) -> str:
    """Run `cell` in this process (--jobs 1); its status after: "aborted" for a diverged
    run (a result: shown, not fatal), else `status`. Any other error stops the grid."""
    from arborl.train.rl import TrainingAborted
    from arborl.train.stop import TrainingStopped

    overrides = start_cell(cfg, cell, status, echo)
    t0 = time.perf_counter()
    try:
        run_cell(cell.kind, overrides)
    except TrainingAborted as e:
        echo(f"[{cell.name}] aborted: {e}")
        return "aborted"
    except TrainingStopped as e:  # SIGTERM/SIGINT: the grid stops; a rerun resumes the cell
        echo(f"[{cell.name}] {e}; `arborl compare --out {cfg.out}` continues the grid")
        raise SystemExit(e.exit_code) from None
    echo(f"[{cell.name}] finished in {time.perf_counter() - t0:.0f} s")
    return status


def run_in_processes(
    cfg: CompareConfig,
    cells: list[Cell],
    statuses: list[str],
    jobs: int,
    echo: Callable[[str], None],
) -> list[str]:
    """Run the cells to run as child processes, `jobs` at a time (`arborl.grid.jobs`), each RL
    cell after its seed's SFT start if that runs too. Returns the statuses after: a
    cell's own, or "aborted", "failed" or "skipped" (its start did not finish)."""
    todo = [i for i, s in enumerate(statuses) if s not in LEFT_ALONE]
    sft_runs = {cells[i].seed: cells[i].name for i in todo if cells[i].kind == "sft"}
    batch = [
        Job(
            cells[i].name,
            cells[i].kind,
            Path(cfg.out) / cells[i].name,
            start=lambda i=i: start_cell(cfg, cells[i], statuses[i], echo),
            after=sft_runs.get(cells[i].seed) if cells[i].kind == "rl" else None,
        )
        for i in todo
    ]
    outcome = run_jobs(batch, jobs, echo)
    after = list(statuses)
    for i in todo:
        if outcome[cells[i].name] != "finished":
            after[i] = outcome[cells[i].name]
    return after


def warn_threads(configs: list[Any], jobs: int, echo: Callable[[str], None]) -> None:
    """Warn once when `jobs` runs at `trainer.num_threads` threads each (`configs`: those
    of the cells to run) ask for more threads than this machine has cores. The thread
    count is left as the grid sets it: it is part of what a run computes
    (docs/training.md, "Reproducibility")."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    # None: torch's default, about every core
    per_run = max((c.trainer.num_threads or cores for c in configs), default=1)
    if jobs > 1 and jobs * per_run > cores:
        echo(
            f"warning: --jobs {jobs} runs {jobs} cells at once with up to {per_run} torch "
            f"threads each (trainer.num_threads), {jobs * per_run} threads on {cores} cores: "
            "they will slow each other down. Use fewer jobs, or trainer.num_threads=1 (the "
            "default) in the grid's overrides"
        )


def run_grid(
    cfg: CompareConfig,
    fresh: bool = False,
    replace: bool = False,
    collect_only: bool = False,
    echo: Callable[[str], None] = print,
    jobs: int = 1,
) -> dict[str, Any]:
    """Run (or with `collect_only`, only read) the grid `cfg`, as the module docstring
    says, then write and return its comparison (`collect`). `jobs` > 1 runs up to that
    many cells at once, as child processes (`run_in_processes`); 1 runs them here, one
    after another."""
    from arborl.train.config import load_train_config

    if jobs < 1:
        raise ConfigError(f"jobs={jobs}: give 1 (one cell at a time) or more")
    cells = plan_grid(cfg)
    # every run's config is checked before any work
    configs = [load_train_config(cell_overrides(cfg, c)) for c in cells]
    out = Path(cfg.out)
    if collect_only:
        return collect(cfg, cells, collect_statuses(cfg, cells, echo))
    with grid_lock(out):  # one compare per grid folder (arborl.grid.guard)
        statuses = plan_statuses(cfg, cells, fresh, replace)
        dump_yaml(cfg, out / "grid.yaml")
        warn_threads([c for c, s in zip(configs, statuses) if s not in LEFT_ALONE], jobs, echo)
        for i, c in enumerate(cells):
            if statuses[i] in LEFT_ALONE:
                echo(f"[{c.name}] {statuses[i]}" + LEFT.get(statuses[i], ""))
            elif jobs == 1:
                statuses[i] = run_here(cfg, c, statuses[i], echo)
        if jobs > 1:
            statuses = run_in_processes(cfg, cells, statuses, jobs, echo)
        return collect(cfg, cells, statuses)


def collect(cfg: CompareConfig, cells: list[Cell], statuses: list[str]) -> dict[str, Any]:
    """Compare the grid's RL runs that exist (`arborl.report.compare`), write
    `comparison.json`, `comparison.txt` and `report.html` into the grid folder, and
    return the comparison with the grid, each cell's status and each SFT start."""
    from arborl.report import load_run, write_report
    from arborl.report.compare import compare_runs, format_comparison

    out = Path(cfg.out)
    have = [(c, s) for c, s in zip(cells, statuses) if (out / c.name / CELL_FILE).exists()]
    runs = [load_run(out / c.name) for c, s in have if c.kind == "rl" and s not in NOT_COMPARED]
    pairs = [(a, b) for a, b in cfg.pairs] or None
    result = compare_runs(runs, pairs, cfg.level)
    starts = []
    for c, _ in have:
        summary = out / c.name / "summary.json"
        if c.kind == "sft" and summary.exists():
            after = json.loads(summary.read_text())["after"]
            starts.append(
                {
                    "seed": c.seed,
                    "run": c.name,
                    **{k: after[k] for k in ("success", "success_lo", "success_hi", "episodes")},
                }
            )
    result = {
        "grid": to_dict(cfg),
        "cells": [
            {"run": c.name, "arm": c.arm, "seed": c.seed, "status": s}
            for c, s in zip(cells, statuses)
        ],
        "starts": starts,
        **result,
    }
    text = format_comparison(result)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "comparison.txt").write_text(text + "\n")
    if runs:
        write_report([r.path for r in runs], out / "report.html", baselines=False)
    result["text"] = text
    return result
