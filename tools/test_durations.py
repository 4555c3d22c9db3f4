#!/usr/bin/env python3
"""Write tests/durations.json (seconds per test file, longest first) from a run's JUnit XML.

    .venv/bin/python -m pytest -q -n 2 --dist loadfile --junitxml=/tmp/suite.xml
    python tools/test_durations.py /tmp/suite.xml

`tests/conftest.py` runs files in that order, longest first, so that on xdist workers no
long file starts last. Re-run it when a file's cost changes a lot; an entry that is stale
only costs balance, never a test.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "durations.json"


def test_file(classname: str) -> str | None:
    """`tests.envs.test_x.TestY` -> `tests/envs/test_x.py` (the longest prefix that is a file)."""
    parts = classname.split(".")
    for n in range(len(parts), 0, -1):
        path = "/".join(parts[:n]) + ".py"
        if (ROOT / path).is_file():
            return path
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", nargs="+", type=Path, help="JUnit XML file(s) of a suite run")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = ap.parse_args()
    seconds: dict[str, float] = defaultdict(float)
    for xml in args.junit:
        for case in ET.parse(xml).getroot().iter("testcase"):
            path = test_file(case.get("classname", ""))
            if path:
                seconds[path] += float(case.get("time", 0.0))
    table = {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{len(table)} files, {sum(table.values()) / 60:.1f} min in all -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
