"""Read every source into `Record`s, skipping (or, strict, stopping at) malformed rows.

A malformed row never stops a lenient run: it is counted with its file, row number, field
and reason, so the report accounts for every input row. Strict mode raises the first
`MalformedRow`, before anything is written. A file that cannot be read at all (a folder,
UTF-16, no row that decodes as UTF-8 JSON) raises `UnreadableInput` in both modes.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

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


def read_file(path: Path, source: SourceConfig, strict: bool, out: ReadResult) -> None:
    shown = display_path(path)
    out.files.append(shown)
    try:
        rows = list(iter_rows(path))
    except (OSError, ValueError, RecursionError) as e:  # e.g. a folder, UTF-16, bad parquet
        raise UnreadableInput(f"{shown}: cannot read the file ({type(e).__name__}: {e})") from e
    if rows and all(isinstance(r, FieldError) and r.field in UNDECODABLE for _, r in rows):
        first = rows[0][1]
        raise UnreadableInput(
            f"{shown}: no row is readable ({len(rows)} of {len(rows)} fail, the first at row "
            f"{rows[0][0]}: {first.reason}); is it UTF-8 JSON Lines? (UTF-16 and latin-1 "
            "files need converting: iconv -f latin1 -t utf-8)"
        )
    for row_no, row in rows:
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
        out.records.append(Record(traj=traj, file=shown, row=row_no, domain=str(domain)))


def read_sources(sources: list[SourceConfig], strict: bool = False) -> ReadResult:
    """All rows of all sources, in order."""
    if not sources:
        raise ValueError(
            "no sources given; add `sources: [{path: data/*.jsonl}]` to the config or "
            "pass sources='[{path: a.jsonl}]'"
        )
    out = ReadResult()
    for i, source in enumerate(sources):
        for path in expand_source(source, f"sources[{i}]"):
            read_file(path, source, strict, out)
    return out
