"""The fault suite's own bookkeeping: docs/security.md's "What we test" table has a row
for every scenario tests/conftest.py names (and no other), so the page cannot drift from
what `make test` checks."""

import re
from pathlib import Path


def test_the_security_page_lists_every_fault_scenario(fault_scenarios):
    doc = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    section = doc[doc.index("## What we test") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    table = section[section.index("| scenario |") :].split("\n\n", 1)[0]  # the first table
    rows = re.findall(r"^\| ([^|]+?) \|", table, flags=re.M)
    named = [r for r in rows if r not in ("scenario",) and not set(r) <= {"-", " "}]
    assert sorted(named) == sorted(fault_scenarios)
