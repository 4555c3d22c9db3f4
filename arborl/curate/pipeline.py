"""`run_curation(cfg)`: read -> filter -> score -> dedup -> mix -> split -> export -> report.

Memory stays bounded as the input grows: the rows are read, filtered and scored one at a
time (`_scan`), and once the rows held reach `max_memory_mb` the rest are spooled to a
temporary file (`RowStore`), each record keeping only what the stages sort and group by.
Later stages read a row's text back when they need it, and the exports write a row at a
time (docs/curation.md, "Memory").

Everything is computed before anything is written; then the whole output tree is built
in a staging folder beside the output folder and swapped in by renaming folders (the old
tree moves aside first, then the new one takes its name, then the old one is deleted). So
a failed run leaves the previous outputs exactly as they were, a finished one holds only
what the current config exports (no stale splits or formats of an earlier run), and no
half-written file is ever at an output path. Leftovers of a killed run (`.<name>.staging-*`,
`.<name>.old-*`) are cleaned up, or put back, by the next run.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from arborl.config import to_dict
from arborl.curate.config import CurateConfig
from arborl.curate.dedup import Signers, exact_dedup, near_dedup
from arborl.curate.exports import export_split
from arborl.curate.filters import make_row_check
from arborl.curate.mixing import mix_domains
from arborl.curate.read import ReadResult, iter_records
from arborl.curate.records import Record, RowStore, _umask
from arborl.curate.report import Report
from arborl.curate.scoring import make_scorer, score_all
from arborl.curate.splits import assign_splits, check_leaks, input_leaks

log = logging.getLogger("arborl")


def _scan(cfg: CurateConfig, report: Report, store: RowStore) -> list[Record]:
    """Read, filter and score the rows one at a time and spool each kept one to `store`:
    what stays in memory is a slim `Record` per row (see `Record.spool`)."""
    read = ReadResult()
    check = make_row_check(cfg.filters)
    q = cfg.quality
    scorer = make_scorer(q.scorer, q.kwargs) if q.scorer is not None else None
    counts: dict[str, Counter] = {s: Counter() for s in ("read", "filter", "quality")}
    later = Report()  # quality drops, listed after every filter drop as the stages run
    kept: list[Record] = []
    batch: list[Record] = []

    def flush() -> None:
        if scorer is not None:
            for r, s in zip(batch, score_all(scorer, [r.traj for r in batch], q.batch_size)):
                r.score = s
        for r in batch:
            if scorer is not None and q.min_score is not None and r.score < q.min_score:
                later.drop("quality", r, f"score {r.score:.4g} < quality.min_score={q.min_score:g}")
                continue
            counts["quality"][r.domain] += 1
            r.spool(store)
            kept.append(r)
        batch.clear()

    for r in iter_records(cfg.sources, cfg.strict, read):
        counts["read"][r.domain] += 1
        failed = check(r)
        if failed is not None:
            report.drop("filter", r, f"{failed[0]}: {failed[1]}")
            continue
        counts["filter"][r.domain] += 1
        batch.append(r)
        if len(batch) >= (q.batch_size if scorer is not None else 1):
            flush()
    flush()
    report.files = read.files
    report.add_malformed(read.malformed)
    for stage, c in counts.items():
        report.set_counts(stage, c)
    report.dropped += later.dropped
    return kept


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cycle collector off while the stages run, back on (if it was) after. The
    stages build millions of small objects and no reference cycles, so every full
    collection walked the whole growing heap and found nothing: with it on, reading
    100,000 rows took twice as long. Reference counting still frees everything."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def curate(cfg: CurateConfig, store: RowStore | None = None) -> tuple[list[Record], Report]:
    """All stages up to and including the split; nothing is written. Rows past
    `cfg.max_memory_mb` are spooled to `store` (default: a new one in the system's temp
    folder), which the returned records read their rows from."""
    if store is None:
        store = RowStore(max_memory_bytes=cfg.max_memory_mb << 20)
    with _cyclic_gc_paused():
        return _curate(cfg, store)


def _curate(cfg: CurateConfig, store: RowStore) -> tuple[list[Record], Report]:
    report = Report()
    signers: Signers = {}  # MinHash signatures, computed once per text and reused below
    records = _scan(cfg, report, store)
    near = partial(near_dedup, signers=signers)
    for stage, fn, on in (("dedup_exact", exact_dedup, cfg.dedup.exact),
                          ("dedup_near", near, cfg.dedup.near)):  # fmt: skip
        if on:
            records, dropped = fn(records, cfg.dedup)
            for r, reason in dropped:
                report.drop(stage, r, reason)
        report.stage(stage, records)
    records, dropped = mix_domains(records, cfg.mix)
    for r, reason in dropped:
        report.drop("mix", r, reason)
    report.stage("mix", records)
    pairs = assign_splits(records, cfg.split, signers)
    report.set_splits(records)
    report.leak_check = check_leaks(records, cfg.split, signers)
    report.input_leaks = input_leaks(records, pairs)
    _warn_empty_splits(report, cfg)
    return records, report


def _warn_empty_splits(report: Report, cfg: CurateConfig) -> None:
    for domain in report.counts.get("mix", {}):
        empty = [s for s in cfg.split.ratios if cfg.split.ratios[s] > 0
                 and not report.splits.get(s, {}).get(domain)]  # fmt: skip
        if empty:
            report.warnings.append(
                f"domain {domain!r} has no rows in split(s) {empty}: too few distinct tasks "
                "(or near-duplicate task texts joined them; see split.threshold)"
            )
    lc = report.leak_check
    if lc.get("task_id_overlaps") or lc.get("near_dup_overlaps"):
        report.warnings.append(f"leak check failed: {lc}")


def _recover(out: Path) -> None:
    """Undo what a kill between the two renames of `_swap_in`, or while staging, left."""
    old = sorted(out.parent.glob(f".{out.name}.old-*"))
    if not out.exists() and len(old) == 1 and (old[0] / "tree").is_dir():
        (old[0] / "tree").rename(out)  # killed between the renames: the old tree is back
    for leftover in [*old, *out.parent.glob(f".{out.name}.staging-*")]:
        shutil.rmtree(leftover, ignore_errors=True)
    foreign = out.is_dir() and any(out.iterdir()) and not (out / "report.json").exists()
    if foreign or (out.exists() and not out.is_dir()):
        raise ValueError(
            f"output folder {out} exists and is not an `arborl curate` output (no "
            "report.json); curate replaces the whole folder, so pick a new or empty one "
            "(--out DIR)"
        )


def _swap_in(staging: Path, out: Path) -> None:
    """Make `staging` the output folder: old aside, new in, old deleted."""
    aside = None
    if out.exists():
        aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
        out.rename(aside / "tree")
    staging.rename(out)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def write_outputs(records: list[Record], report: Report, cfg: CurateConfig, out: Path) -> None:
    """Exports per split, report.json, report.txt and config.yaml: the whole tree staged,
    then swapped in for the previous one (see the module docstring)."""
    import yaml

    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    _recover(out)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.staging-"))
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes 0700; give the usual folder mode
    try:
        for split in cfg.split.ratios:
            part = [r for r in records if r.split == split]
            counts = export_split(staging, split, part, cfg.export)
            lost = counts.pop("lost_fields", None)
            if lost:
                report.warnings.append(
                    f"{split}/trajectories: the {cfg.export.trajectories_format} format cannot "
                    f"hold {', '.join(lost)}"
                )
            report.exports[split] = counts
        (staging / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
        (staging / "report.txt").write_text(report.table() + "\n")
        (staging / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        _swap_in(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def run_curation(cfg: CurateConfig, output_dir: str | Path | None = None) -> Report:
    """Curate and write everything under `output_dir` (default `cfg.output_dir`). Rows past
    `cfg.max_memory_mb` are spooled beside it (a temporary file; see `RowStore`)."""
    out = Path(output_dir or cfg.output_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    store = RowStore(out.parent, max_memory_bytes=cfg.max_memory_mb << 20)
    try:
        records, report = curate(cfg, store)
        write_outputs(records, report, cfg, out)
    finally:
        store.close()
    return report
