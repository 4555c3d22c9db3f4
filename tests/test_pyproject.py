"""The project metadata builds without setuptools deprecation warnings (the install used
to print one for `project.license` written as a TOML table instead of an SPDX string)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_metadata_builds_quietly_with_an_spdx_license(tmp_path):
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "arborl").mkdir()
    shutil.copy(ROOT / "arborl" / "__init__.py", tmp_path / "arborl")
    code = "import setuptools.build_meta as b\nprint(b.prepare_metadata_for_build_wheel('md'))\n"
    (tmp_path / "md").mkdir()
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Deprecat" not in done.stderr, done.stderr[-2000:]
    meta = (tmp_path / "md" / done.stdout.split()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in meta.splitlines()
