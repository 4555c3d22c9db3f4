"""The curation report: rows per domain after every stage, and why each dropped row went.

`Report` is filled in as the stages run; `to_dict()` is the JSON written as
`report.json` and `table()` the same figures as readable text (`report.txt`, also printed
by `arborl curate`). Every input row is accounted for: malformed rows (with file, row,
field) plus rows dropped by a stage (with file, row, stage, reason) plus the rows kept
add up to the rows read.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from arborl.curate.records import MalformedRow, Record

STAGES = ("read", "filter", "quality", "dedup_exact", "dedup_near", "mix")
"""Stages in the order they run; counts are rows kept after each."""


@dataclass
class Report:
    files: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    malformed: list[dict[str, Any]] = field(default_factory=list)
    splits: dict[str, dict[str, int]] = field(default_factory=dict)
    exports: dict[str, dict[str, int]] = field(default_factory=dict)
    leak_check: dict[str, Any] = field(default_factory=dict)
    input_leaks: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def stage(self, name: str, records: list[Record]) -> None:
        """Record the rows per domain kept after stage `name`."""
        self.counts[name] = dict(sorted(Counter(r.domain for r in records).items()))

    def set_counts(self, name: str, counts: Counter) -> None:
        """`stage` from counts made as the rows went by (the streamed first stages)."""
        self.counts[name] = dict(sorted(counts.items()))

    def drop(self, stage: str, r: Record, reason: str) -> None:
        self.dropped.append({"stage": stage, "file": r.file, "row": r.row, "domain": r.domain,
                             "task_id": r.task_id, "reason": reason})  # fmt: skip

    def add_malformed(self, rows: list[MalformedRow]) -> None:
        self.malformed += [m.to_dict() for m in rows]

    def set_splits(self, records: list[Record]) -> None:
        table: dict[str, Counter] = defaultdict(Counter)
        for r in records:
            table[str(r.split)][r.domain] += 1
        self.splits = {s: dict(sorted(c.items())) for s, c in table.items()}

    def domains(self) -> list[str]:
        names = {d for c in self.counts.values() for d in c}
        return sorted(names | {d["domain"] for d in self.dropped})

    def to_dict(self) -> dict[str, Any]:
        num_read = sum(self.counts.get("read", {}).values())
        final = self.counts.get(STAGES[-1], {})
        return {
            "files": self.files,
            "num_rows": num_read + len(self.malformed),
            "num_malformed": len(self.malformed),
            "num_dropped": len(self.dropped),
            "num_kept": sum(final.values()),
            "counts": self.counts,
            "dropped_by_stage": dict(Counter(d["stage"] for d in self.dropped)),
            "splits": self.splits,
            "exports": self.exports,
            "leak_check": self.leak_check,
            "input_leaks": self.input_leaks,
            "warnings": self.warnings,
            "malformed": self.malformed,
            "dropped": self.dropped,
        }

    def table(self, max_reasons: int = 5) -> str:
        """Rows per domain after each stage, then splits and exports, then reasons."""
        stages = [s for s in STAGES if s in self.counts]
        splits = list(self.splits)
        head = ["domain", *stages, *splits]
        body = [[d, *(str(self.counts[s].get(d, 0)) for s in stages),
                 *(str(self.splits[s].get(d, 0)) for s in splits)] for d in self.domains()]  # fmt: skip
        body.append(["total", *(str(sum(self.counts[s].values())) for s in stages),
                     *(str(sum(self.splits[s].values())) for s in splits)])  # fmt: skip
        widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
        lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                           enumerate(zip(row, widths))) for row in [head, *body]]  # fmt: skip
        lines.append(f"malformed rows skipped: {len(self.malformed)}")
        for m in self.malformed[:max_reasons]:
            lines.append(f"  {m['file']} row {m['row']}: {m['field']}: {m['reason']}")
        reasons = Counter((d["stage"], d["reason"].split(" of ")[0]) for d in self.dropped)
        lines.append(
            f"rows dropped: {len(self.dropped)} (every one with its reason in report.json)"
        )
        for (stage, reason), n in reasons.most_common(max_reasons * 2):
            lines.append(f"  {n:4d}  {stage}: {reason}")
        lc = self.leak_check
        if lc:
            lines.append(f"leak check: {lc['task_id_overlaps']} tasks and "
                         f"{lc['near_dup_overlaps']} near-duplicate task texts in two splits")  # fmt: skip
        lines.append(f"leaks in the inputs' own splits, repaired: {len(self.input_leaks)}")
        for split, kinds in self.exports.items():
            lines.append(f"export {split}: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)
