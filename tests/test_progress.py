"""Progress on a terminal is a tqdm bar; in a log file it is plain lines, never the
carriage-return redraws that nested bars turn into one unreadable line."""

from __future__ import annotations

import io
import os
import sys

from arborl import progress as P


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_file_gets_a_line_per_tenth_with_the_postfix():
    out = io.StringIO()
    bar = P.progress(160, "train", file=out)
    assert isinstance(bar, P.PlainProgress)
    for step in range(155):
        bar.update(1)
        if step == 20:
            bar.set_postfix({"success": "0.41"})
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 10  # 16, 32, ... 144, then 155 on close
    assert lines[0].startswith("train: 16/160 (10%) ") and lines[0].endswith(" s")
    assert lines[1].startswith("train: 32/160 (20%) ") and lines[1].endswith("success=0.41")
    assert lines[-1].startswith("train: 155/160 (97%) ")


def test_a_jump_past_several_tenths_writes_one_line_and_disable_writes_none():
    out = io.StringIO()
    with P.progress(10, "episodes", file=out) as bar:
        bar.update(7)
        bar.update(3)
    assert [line.split(" ")[1] for line in out.getvalue().splitlines()] == ["7/10", "10/10"]
    quiet = io.StringIO()
    with P.progress(10, "episodes", disable=True, file=quiet) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""


def test_an_unknown_total_writes_every_interval(monkeypatch):
    monkeypatch.setattr(P, "PLAIN_EVERY_S", 0.0)
    out = io.StringIO()
    bar = P.progress(None, "steps", file=out)
    bar.update(2)
    bar.update(3)
    bar.close()
    assert [line.split(" ")[1] for line in out.getvalue().splitlines()] == ["2", "5"]


def test_a_terminal_gets_a_tqdm_bar():
    from tqdm.auto import tqdm

    bar = P.progress(5, "x", file=Terminal())
    assert isinstance(bar, tqdm)
    bar.close()


def test_other_libraries_bars_are_off_in_a_log_file_only(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(sys, "stderr", Terminal())
    P.quiet_foreign_bars()
    assert "TQDM_DISABLE" not in os.environ
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    P.quiet_foreign_bars()
    assert os.environ["TQDM_DISABLE"] == "1"


def test_arborl_eval_in_a_log_file_writes_plain_progress_lines(capsys, monkeypatch):
    from arborl.cli.main import main

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    argv = ["eval", "--policy", "random", "--env", "arborl/Maze-v0", "--num-episodes", "4",
            "--max-turns", "3"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    assert "random episodes: 4/4 (100%)" in err and "oracle episodes: 4/4 (100%)" in err
