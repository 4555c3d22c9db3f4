"""The Tower of Hanoi example package (`fixtures/hanoi_pkg`, docs/envs.md's full example)
"installed" without pip: a `newbie_hanoi-0.1.dist-info` folder (METADATA and
`entry_points.txt`, copied from the package's pyproject.toml) beside the package's source
on a path that a fresh interpreter gets as PYTHONPATH, so `importlib.metadata` finds its
`arborl.envs` and `arborl.env_configs` entry points as it would after `pip install`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HANOI_SRC = Path(__file__).parent / "fixtures" / "hanoi_pkg"
HANOI_ID = "newbie/Hanoi-v0"
ENTRY_POINTS = """\
[arborl.envs]
newbie/Hanoi-v0 = newbie_hanoi:register_envs

[arborl.env_configs]
hanoi = newbie_hanoi:hanoi.yaml
"""


def install_hanoi(site: Path) -> list[str]:
    """Write the dist-info into `site`; the sys.path entries that make the package found."""
    info = site / "newbie_hanoi-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: newbie-hanoi\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return [str(site), str(HANOI_SRC)]


def run_fresh(code: str, paths: list[str], cwd: Path, timeout: float = 300):
    """Run `code` in a new interpreter with `paths` first on its PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", code]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
