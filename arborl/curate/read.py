"""Read every source into `Record`s, skipping (or, strict, stopping at) malformed rows.

Rows are read one at a time (`iter_records`): JSON Lines and parquet files are streamed,
a `.json` file (one JSON list) is parsed whole.

A malformed row never stops a lenient run: it is counted with its file, row number, field
and reason, so the report accounts for every input row. Strict mode raises the first
`MalformedRow`, before anything is written. A file that cannot be read at all (a folder,
UTF-16, no row that decodes as UTF-8 JSON) raises `UnreadableInput` in both modes.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arborl.curate.config import SourceConfig
from arborl.curate.formats import parse_row
from arborl.curate.records import FieldError, MalformedRow, Record, display_path, iter_rows

UNDECODABLE = ("(encoding)", "(json)")
"""The fields of rows that could not even be decoded: a file of only these is unreadable."""


class UnreadableInput(ValueError):
    """An input file that cannot be read at all (a folder, a wrong encoding, not JSON):
    the run fails (exit 1) rather than reporting every row as malformed."""


@dataclass
class ReadResult:
    records: list[Record] = field(default_factory=list)
    malformed: list[MalformedRow] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def expand_source(source: SourceConfig, prefix: str = "sources") -> list[Path]:
    """The files a source's path or glob names (sorted); raises if it names none."""
    if any(ch in source.path for ch in "*?["):
        paths = sorted(Path(p) for p in glob.glob(source.path, recursive=True))
    else:
        paths = [Path(source.path)] if Path(source.path).exists() else []
    if not paths:
        raise FileNotFoundError(
            f"{prefix}.path={source.path!r} matches no file; check the path (relative paths "
            "start at the working directory)"
        )
    return paths


def _rows(path: Path, shown: str) -> Iterator[tuple[int, Any]]:
    """`iter_rows(path)`, with a file that cannot be read at all as `UnreadableInput`."""
    rows = iter_rows(path)
    while True:
        try:
            item = next(rows)
        except StopIteration:
            return
        except (OSError, ValueError, RecursionError) as e:  # a folder, UTF-16, bad parquet
            raise UnreadableInput(f"{shown}: cannot read the file ({type(e).__name__}: {e})") from e
        yield item


def iter_file(path: Path, source: SourceConfig, strict: bool, out: ReadResult) -> Iterator[Record]:
    """The records of one file, one at a time (a JSONL or parquet file is streamed, so
    memory does not grow with it); malformed rows go to `out.malformed`."""
    shown = display_path(path)
    out.files.append(shown)
    undecodable: list[MalformedRow] = []  # held while every row so far is undecodable
    seen_good = False
    for row_no, row in _rows(path, shown):
        if not seen_good and isinstance(row, FieldError) and row.field in UNDECODABLE:
            undecodable.append(MalformedRow(shown, row_no, row.field, row.reason))
            continue
        if not seen_good:  # a row that decodes: the file is readable, so the rows held
            seen_good = True  # before it are ordinary malformed rows
            if undecodable and strict:
                raise undecodable[0]
            out.malformed += undecodable
        try:
            traj = parse_row(row, source)
        except FieldError as e:
            bad = MalformedRow(shown, row_no, e.field, e.reason)
            if strict:
                raise bad from e
            out.malformed.append(bad)
            continue
        domain = source.domain or traj.meta.get("domain") or traj.env_id
        traj.meta["domain"] = domain
        traj.meta["source_file"], traj.meta["source_row"] = shown, row_no
        if source.split:
            traj.meta["source_split"] = source.split
        yield Record(traj=traj, file=shown, row=row_no, domain=str(domain))
    if undecodable and not seen_good:
        first = undecodable[0]
        raise UnreadableInput(
            f"{shown}: no row is readable ({len(undecodable)} of {len(undecodable)} fail, the "
            f"first at row {first.row}: {first.reason}); is it UTF-8 JSON Lines? (UTF-16 and "
            "latin-1 files need converting: iconv -f latin1 -t utf-8)"
        )


def iter_records(sources: list[SourceConfig], strict: bool, out: ReadResult) -> Iterator[Record]:
    """All rows of all sources, in order, one at a time; files and malformed rows are
    recorded in `out` (its `records` stay empty)."""
    if not sources:
        raise ValueError(
            "no sources given; add `sources: [{path: data/*.jsonl}]` to the config or "
            "pass sources='[{path: a.jsonl}]'"
        )
    for i, source in enumerate(sources):
        for path in expand_source(source, f"sources[{i}]"):
            yield from iter_file(path, source, strict, out)


def read_sources(sources: list[SourceConfig], strict: bool = False) -> ReadResult:
    """All rows of all sources, in order, in memory (`iter_records` streams them)."""
    out = ReadResult()
    out.records = list(iter_records(sources, strict, out))
    return out
