"""Progress that reads well on a terminal and in a log file.

tqdm redraws its bar with carriage returns: on a terminal that is one live line, but in a
file (`arborl train > run.txt`, a CI log, a job scheduler's capture) every redraw stays,
and nested bars (a run's bar, an evaluation's, a download's) interleave into one unreadable
line. `progress(...)` gives a tqdm bar when its stream is a terminal and otherwise a
`PlainProgress`, which writes a whole line at each tenth of the way (or every
`PLAIN_EVERY_S` seconds when the total is unknown) with the same small API. On a non-TTY
the CLI also sets `TQDM_DISABLE=1` (`quiet_foreign_bars`), so third-party tqdm bars
(transformers, datasets) stay out of the file. Standard library and tqdm only.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

PLAIN_EVERY_S = 30.0
"""Seconds between plain lines when the total is unknown."""


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", None) and stream.isatty())


class PlainProgress:
    """tqdm's `update`, `set_postfix`, `close` and `n`, written as plain lines:
    `desc: 40/160 (25%) 12 s loss=0.41`."""

    def __init__(
        self, total: float | None, desc: str = "", file: TextIO | None = None, disable: bool = False
    ) -> None:
        self.total, self.desc, self.file, self.disable = total, desc, file, disable
        self.n = 0
        self.postfix = ""
        self._t0 = self._last = time.monotonic()
        self._next_tenth = 1
        self._shown = 0

    def update(self, n: float = 1) -> None:
        self.n += n
        if self.disable:
            return
        if self.total:
            if self.n * 10 >= self._next_tenth * self.total:
                while self._next_tenth * self.total <= self.n * 10 and self._next_tenth <= 10:
                    self._next_tenth += 1
                self._write()
        elif time.monotonic() - self._last >= PLAIN_EVERY_S:
            self._write()

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kw: Any):
        items = {**(ordered_dict or {}), **kw}
        self.postfix = " ".join(f"{k}={v}" for k, v in items.items())

    def _write(self) -> None:
        self._last, self._shown = time.monotonic(), self.n
        done = f"{self.n:g}" + (
            f"/{self.total:g} ({100 * self.n / self.total:.0f}%)" if self.total else ""
        )
        line = f"{self.desc}: {done} {self._last - self._t0:.0f} s {self.postfix}".rstrip()
        print(line, file=self.file or sys.stderr, flush=True)

    def close(self) -> None:
        if not self.disable and self.n != self._shown:
            self._write()  # the last state, whatever tenth it stopped at
        self.disable = True

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress(
    total: float | None = None, desc: str = "", disable: bool | None = False, **tqdm_kwargs: Any
) -> Any:
    """A tqdm bar on a terminal (stderr, or `file=`), else a `PlainProgress`; `disable`
    hides either (None: shown either way, as a bar or as lines)."""
    stream = tqdm_kwargs.get("file") or sys.stderr
    if is_terminal(stream):
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, disable=disable, **tqdm_kwargs)
    return PlainProgress(total, desc, stream, disable=bool(disable))  # None: shown, as lines


def quiet_foreign_bars() -> None:
    """On a non-TTY stderr, turn off other libraries' tqdm bars (tqdm reads TQDM_DISABLE);
    arborl's own progress goes through `progress` and still writes plain lines."""
    if not is_terminal():
        os.environ.setdefault("TQDM_DISABLE", "1")
