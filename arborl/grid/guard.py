"""Guards of an `arborl compare` grid folder: one running compare per `--out`, and the
cell files it reads back named when they are damaged.

One writer: two compares on one `--out` at once used to agree that every cell was "busy"
(each cell's run folder is locked by its trainer), so the second ran nothing, exited 0 and
overwrote `comparison.json`, `.txt` and `report.html` with an empty table while the first
still ran. `grid_lock` holds an exclusive `flock` on `<out>/.compare.lock` for the whole
call, as a trainer does on its run folder (`arborl.train.runlog`): a second compare stops
at once with `GridBusy`, naming the first one's pid. The kernel drops the lock when its
holder dies, even by kill -9, so a killed compare never leaves the folder stuck.

Damaged files: a cell's `compare_cell.json` (which grid cell its folder holds) that is not
JSON gave a raw `JSONDecodeError` traceback naming no file; `read_cell_json` turns it into
one `GridConflict` line naming the file, what is wrong with it and how to rerun the cell.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from arborl.train.runlog import take_lock

LOCK_FILE = ".compare.lock"
"""The file in a grid folder whose `flock` marks the one compare running it."""


class GridBusy(RuntimeError):
    """Another live `arborl compare` runs the same grid folder."""


@contextmanager
def grid_lock(out: Path) -> Iterator[None]:
    """Hold `out`'s grid lock for the block (no waiting): raise `GridBusy`, naming the
    holder's pid, when another live compare holds it."""
    out.mkdir(parents=True, exist_ok=True)

    def busy(holder: str) -> GridBusy:
        return GridBusy(
            f"grid folder {out} is in use by another `arborl compare` ({holder}); two "
            "at once would leave the running cells alone and overwrite its comparison "
            f"with an empty table. Wait for that one to end (then `arborl compare --out "
            f"{out}` resumes or collects the grid), or give this one another --out"
        )

    f = take_lock(out / LOCK_FILE, busy)
    try:
        yield
    finally:
        f.close()  # drops the lock


def read_cell_json(path: Path, error: type[Exception]) -> Any:
    """The JSON in grid cell file `path`, None when it does not exist; raise `error` (one
    line: the file, what is wrong, how to rerun the cell) when it cannot be read or parsed."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise error(
            f"{path} is damaged ({e}): it records which grid cell the folder "
            f"{path.parent} holds. Rerun that cell with --replace (which deletes the folder "
            "and runs it again), or delete the folder yourself and run the grid again"
        ) from None
