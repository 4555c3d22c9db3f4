"""`make test` runs files longest first (tests/conftest.py, tests/durations.json)."""

import json
from types import SimpleNamespace

from tests import conftest


def test_files_run_longest_first_and_keep_their_tests_together(tmp_path, monkeypatch):
    table = tmp_path / "durations.json"
    table.write_text(json.dumps({"tests/b.py": 90.0, "tests/c.py": 300.0}))
    monkeypatch.setattr(conftest, "DURATIONS", table)
    ids = ["tests/a.py::t1", "tests/b.py::t1", "tests/a.py::t2", "tests/c.py::t1",
           "tests/b.py::t2", "tests/d.py::t1", "tests/c.py::t2"]  # fmt: skip
    items = [SimpleNamespace(nodeid=i) for i in ids]
    conftest._longest_files_first(items)
    assert [i.nodeid for i in items] == [
        "tests/c.py::t1", "tests/c.py::t2", "tests/b.py::t1", "tests/b.py::t2",
        "tests/a.py::t1", "tests/a.py::t2", "tests/d.py::t1",
    ]  # fmt: skip


def test_the_table_names_existing_files_only():
    from pathlib import Path

    root = Path(conftest.__file__).parents[1]
    table = json.loads(conftest.DURATIONS.read_text())
    assert table and all((root / f).is_file() for f in table), [
        f for f in table if not (root / f).is_file()
    ]


def test_ci_runs_both_tiers_and_the_tiers_split_by_the_slow_marker():
    """`make test` (not slow) and `make test-slow` (slow) cover every test between them, once
    each, and CI (`.ci/run`) runs `make test-all`, which runs both."""
    import re
    from pathlib import Path

    root = Path(conftest.__file__).parents[1]
    make = (root / "Makefile").read_text()

    def recipe(target: str) -> str:
        return re.search(rf"^{target}: .*\n((?:\t.*\n)+)", make, re.M).group(1)

    assert '-m "not slow"' in recipe("test") and "-m slow" in recipe("test-slow")
    assert recipe("test-all").split() == ["$(MAKE)", "test", "$(MAKE)", "test-slow"]
    ci = [ln for ln in (root / ".ci" / "run").read_text().splitlines() if ln and ln[0] != "#"]
    assert ci[-1] == "make test-all"
    assert "make test-all" in (root / "README.md").read_text()
