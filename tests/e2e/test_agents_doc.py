"""docs/agents.md's example runs as written (issue 32 req 7): the agent file and the
`arborl train` command are read from the page, the command runs in-process (its output
folder moved to a temporary one), and the page's example stays under 40 lines."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def _block(text: str, marker: str) -> str:
    m = re.search(rf"<!-- example: {re.escape(marker)} -->\n```\w+\n(.*?)```", text, re.DOTALL)
    assert m, f"docs/agents.md lost its '{marker}' example block"
    return m.group(1)


@pytest.mark.slow  # a whole `arborl train` run, and the Agents SDK's import (~3 CPU s)
def test_train_your_own_agent_example_runs(tmp_path, monkeypatch):
    from arborl.cli.main import main

    text = DOC.read_text()
    code, command = _block(text, "my_agent.py"), _block(text, "command")
    assert len(code.splitlines()) + len(command.splitlines()) < 40
    (tmp_path / "my_agent.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))  # what PYTHONPATH=. does in the page
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:3] == ["PYTHONPATH=.", "arborl", "train"]
    out = tmp_path / "runs"
    extra = [f"trainer.output_dir={out}", "trainer.name=doc", "trainer.progress=false",
             "trainer.report=false", "trainer.plots=false", "trainer.num_threads=1"]  # fmt: skip
    # A random tiny model never answers right: no group has a signal, and the run says so
    # (docs/agents.md: "the toy run learns nothing, and says so").
    assert main(argv[2:] + extra) == 3
    rows = [json.loads(x) for x in (out / "doc" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/success" in r]
    assert len(steps) == 2 and all(r["rollout/env_errors"] == 0 for r in steps)
    summary = json.loads((out / "doc" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["after"]["episodes"] == 4
    assert summary["failures"]["verdict"] == "no_rows"
    assert summary["failures"]["total_errored"] == 0
