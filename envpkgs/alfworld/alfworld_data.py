"""Where ALFWorld's game files are, and the benchmark's splits over them.

ALFWorld's text games (`json_2.1.1/<split>/<task-type>-.../<trial>/game.tw-pddl`) come,
on a normal machine, from `alfworld-download`, which puts them under `ALFWORLD_DATA`
(default `~/.cache/alfworld`). That stays the default. A machine without internet can name
a folder of the release archives (`alf_eval.tar.xz`, `alf_train.tar.xz`, as in arborl's
`../shared/data/alfworld`) with `ARBORL_ALFWORLD_ARCHIVES`; each archive is unpacked once
into `ARBORL_ALFWORLD_CACHE` (default `~/.cache/arborl/alfworld`), never into the repo.
Standard library only, so the host can check the data without the package's venv.
"""

from __future__ import annotations

import fcntl
import os
import tarfile
from pathlib import Path

SPLIT_COUNTS = {"train": 3553, "valid_seen": 140, "valid_unseen": 134, "valid_train": 200}
"""The official game counts per split (json_2.1.1)."""
SPLIT_ALIASES = {"val": "valid_seen", "test": "valid_unseen"}
"""arborl's generic split names: val = in-distribution eval, test = out-of-distribution."""
ARCHIVE_OF = {"train": "alf_train.tar.xz"}
"""Which archive holds a split (every other split is in alf_eval.tar.xz)."""
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
GAME_FILE = "game.tw-pddl"


class DataMissing(FileNotFoundError):
    """No ALFWorld game files were found; the message says both ways to get them."""


def canonical_split(split: str) -> str:
    """`split` as an ALFWorld split name (val/test mapped); raises on an unknown name."""
    name = SPLIT_ALIASES.get(split, split)
    if name not in SPLIT_COUNTS:
        known = sorted(SPLIT_COUNTS) + sorted(SPLIT_ALIASES)
        raise ValueError(f"split={split!r} is not an ALFWorld split; use one of {known}")
    return name


def _missing(detail: str) -> DataMissing:
    return DataMissing(
        f"ALFWorld game files not found ({detail}). Get them either way: (1) on a machine "
        f"with internet, run `alfworld-download` inside the package's venv (it fills "
        f"ALFWORLD_DATA, default ~/.cache/alfworld) or point ALFWORLD_DATA at a folder "
        f"holding json_2.1.1/; (2) offline, set ARBORL_ALFWORLD_ARCHIVES to a folder with "
        f"alf_eval.tar.xz and alf_train.tar.xz (e.g. ../shared/data/alfworld), which arborl "
        f"unpacks once into ARBORL_ALFWORLD_CACHE (default ~/.cache/arborl/alfworld)"
    )


def _unpack_once(archive: Path, cache: Path) -> None:
    """Unpack `archive` into `cache` once; a lock makes parallel workers wait, not race."""
    marker = cache / f".{archive.name}.done"
    if marker.exists():
        return
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return
        with tarfile.open(archive) as tar:
            tar.extractall(cache, filter="data")
        marker.write_text(str(archive))


def data_root(split: str) -> Path:
    """The `json_2.1.1` folder holding `split`, unpacking the offline archive if needed.

    Order: ALFWORLD_DATA (default ~/.cache/alfworld, which `import alfworld` itself sets)
    when it holds the split; else the archives of ARBORL_ALFWORLD_ARCHIVES; else an error.
    """
    split = canonical_split(split)
    user = os.environ.get("ALFWORLD_DATA") or str(Path.home() / ".cache" / "alfworld")
    root = Path(user).expanduser() / "json_2.1.1"
    if (root / split).is_dir():
        return root
    archives = os.environ.get("ARBORL_ALFWORLD_ARCHIVES")
    if not archives:
        raise _missing(f"ALFWORLD_DATA={user!r} has no json_2.1.1/{split} and "
                       f"ARBORL_ALFWORLD_ARCHIVES is not set")  # fmt: skip
    archive = Path(archives).expanduser() / ARCHIVE_OF.get(split, "alf_eval.tar.xz")
    default_cache = Path.home() / ".cache" / "arborl" / "alfworld"
    cache = Path(os.environ.get("ARBORL_ALFWORLD_CACHE", default_cache)).expanduser()
    if not (cache / f".{archive.name}.done").exists() and not archive.is_file():
        raise _missing(f"ARBORL_ALFWORLD_ARCHIVES={archives!r} has no {archive.name}")
    _unpack_once(archive, cache)
    return cache / "json_2.1.1"


def game_files(split: str) -> list[str]:
    """The split's game files, relative to `data_root(split)`, sorted (a stable order)."""
    root = data_root(split)
    name = canonical_split(split)
    return sorted(str(p.relative_to(root)) for p in (root / name).glob(f"*/*/{GAME_FILE}"))


def task_type(game: str) -> str:
    """The task type of a game path (its folder name starts with it)."""
    folder = Path(game).parts[1]
    return next(t for t in TASK_TYPES if folder.startswith(t))
