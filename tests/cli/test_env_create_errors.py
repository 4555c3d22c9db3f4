"""Envs that cannot be created reach the user as their own message and exit 2 (review-3
defect 15: `arborl eval --env alfworld/ALFWorld-v0` without the game data printed ~40 lines
of traceback with the right `DataMissing` message somewhere inside).

The env here finds its data exactly as ALFWorld does: it calls the real
`envpkgs/alfworld/alfworld_data.py` (`data_root`), with `ALFWORLD_DATA` pointing at an empty
folder and no archives, so it raises ALFWorld's own `DataMissing`. (The ALFWorld package
itself needs its venv built, which compiles fast-downward: minutes.) It is a plain env made
known to the `arborl` subprocess, and to its env workers, by an `arborl.envs` entry point
of a distribution on PYTHONPATH, as a pip-installed plug-in would be. Real processes: the
`arborl` command, and in subprocess mode its env worker, whose reply must carry the
message, not a repr or a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV_ID = "nodata/Alf-v0"
PLUGIN = """
import alfworld_data
from arborl.envs.builtin.maze import MazeEnv


class AlfDataEnv(MazeEnv):
    def __init__(self, split="train", **kwargs):
        alfworld_data.data_root("valid_unseen")  # ALFWorld's own data lookup
        super().__init__(split=split, **kwargs)
"""


def _plugin(site: Path) -> None:
    """A module and a `*.dist-info` with its `arborl.envs` entry point, in folder `site`."""
    site.mkdir()
    (site / "nodata_env.py").write_text(PLUGIN)
    info = site / "nodata_env-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nodata-env\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[arborl.envs]\n{ENV_ID} = nodata_env:AlfDataEnv\n")


@pytest.mark.parametrize(
    "command,mode", [("eval", "inproc"), ("eval", "subprocess"), ("train", "subprocess")]
)
def test_missing_env_data_is_the_envs_message_alone_and_exit_2(tmp_path, mode, command):
    _plugin(tmp_path / "site")
    (tmp_path / "empty").mkdir()
    path = [str(tmp_path / "site"), str(REPO / "envpkgs" / "alfworld"), str(REPO)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "OMP_NUM_THREADS": "1",
           "ALFWORLD_DATA": str(tmp_path / "empty"), "HOME": str(tmp_path)}  # fmt: skip
    env.pop("ARBORL_ALFWORLD_ARCHIVES", None)
    if command == "eval":
        args = ["eval", "--policy", "random", "--env", ENV_ID, "--pool-mode", mode,
                "--num-episodes", "2", "--no-progress", "--no-baselines"]  # fmt: skip
    else:
        args = ["train", f"env.id={ENV_ID}", f"env.pool_mode={mode}", "sft.enabled=false",
                "model.name_or_path=tiny-0.1m", "trainer.progress=false",
                f"trainer.output_dir={tmp_path / 'runs'}", "trainer.name=r"]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "arborl.cli.main", *args], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith(f"error: could not create the envs of {ENV_ID} ({mode} pool")
    # ALFWorld's own message, whole: what is missing and both ways to get it
    assert "DataMissing: ALFWorld game files not found (ALFWORLD_DATA=" in line
    assert str(tmp_path / "empty") in line and "ARBORL_ALFWORLD_ARCHIVES" in line
    assert "alfworld-download" in line and "internal:" not in line
