"""`arborl env add` with a bad manifest prints one `error:` line and exits 2 (issue 34,
review-2 defect 10: every refused manifest printed an 18-line traceback, and a NUL byte in
a path a bare `ValueError: embedded null byte` naming no file)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

MANIFESTS = {
    "parent": ('setup_script: "../outside.sh"', "points outside the package folder"),
    "absolute": ('setup_script: "/etc/hostname"', "points outside the package folder"),
    "nul": ('setup_script: "setup\\0.sh"', "holds a NUL byte"),
    "unparsable": ("envs: [unclosed", "cannot parse"),
    "bad_id": ("", "must be versioned"),
}


@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_a_bad_manifest_is_one_error_line_and_exit_2(case, tmp_path):
    extra, expected = MANIFESTS[case]
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    env_id = "me/Bad" if case == "bad_id" else "me/Bad-v0"
    body = f"name: bad\nenvs:\n  - {{id: {env_id}, entry_point: 'bad_env:Env'}}\n"
    (pkg / "arborl-env.yaml").write_text(extra if case == "unparsable" else body + extra + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "env", "add", str(pkg)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "ARBORL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert "arborl-env.yaml" in lines[0] and "Traceback" not in done.stderr


def test_a_missing_folder_is_one_error_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "env", "add", str(tmp_path / "nope")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "ARBORL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr
    assert "does not exist" in done.stderr and len(done.stderr.strip().splitlines()) == 1
