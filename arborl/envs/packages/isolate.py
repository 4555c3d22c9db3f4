"""`arborl env setup`: build an env package's own interpreter, once per manifest version.

With a conda `environment.yml` in the manifest the interpreter is a conda prefix made by
micromamba, mamba or conda (whichever is on PATH, in that order); otherwise a venv made
by the right `pythonX.Y`, with pip. Either way pip then installs the manifest's pip
requirements plus the env-server runtime (FastAPI, uvicorn), a `.pth` file puts arborl's
own `arborl.envs` code (a link to the host's package, which imports no torch) and the
package folder on `sys.path`, and the setup script runs inside.

Set-up is idempotent: the prefix is named by, and stamped with, the hash of the manifest
and every file it names, so a second run is a no-op and an edited manifest builds a fresh
prefix. Every command and its output go to `<prefix>.log`; a failing command raises
`SetupError` with the command line and the last lines of its output.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from arborl.envs.packages.manifest import EnvManifest
from arborl.envs.packages.userdata import arborl_home, package_of

RUNTIME_REQUIREMENTS = ("fastapi>=0.110", "uvicorn>=0.29", "websockets>=12")
"""Installed into every isolated interpreter so it can run the HTTP env server and the
OpenEnv one (`env serve --protocol openenv`: uvicorn serves WebSockets with `websockets`)."""
CONDA_EXECUTABLES = ("micromamba", "mamba", "conda")
STAMP = ".arborl-setup.json"
TAIL_LINES = 30

CONDA_INSTALL_HINT = (
    "install micromamba (a single static binary: see the micromamba installation page of the "
    "mamba docs) or Miniforge, make sure `micromamba`, `mamba` or `conda` is on PATH, then "
    "run `arborl env setup` again"
)


class SetupError(RuntimeError):
    """A set-up command failed; the message holds the command and its last output lines."""


@dataclass
class Interpreter:
    """An env package's isolated interpreter."""

    prefix: Path
    """The venv or conda prefix."""
    python: Path
    """Its Python executable."""
    backend: str
    """'venv' or the conda executable's name."""
    manifest: EnvManifest
    """The package it was built for."""

    @property
    def log(self) -> Path:
        return self.prefix.with_suffix(".log")


def _arborl_package_dir() -> Path:
    return Path(__file__).resolve().parents[2]


def prefix_for(m: EnvManifest) -> Path:
    """Where the package's interpreter lives: `ARBORL_HOME/envs/<name>-<hash12>`."""
    return arborl_home() / "envs" / f"{m.name}-{setup_hash(m)[:12]}"


def setup_hash(m: EnvManifest) -> str:
    """The idempotency key: the manifest hash plus the runtime and arborl location."""
    return m.hash(extra=json.dumps([RUNTIME_REQUIREMENTS, str(_arborl_package_dir())]))


def find_conda() -> str | None:
    """The first of micromamba, mamba, conda on PATH (None when none is)."""
    for name in CONDA_EXECUTABLES:
        path = shutil.which(name)
        if path:
            return path
    return None


def find_python(version: str) -> str:
    """An interpreter of `version` ('' or the host's version: the host's own)."""
    host = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not version or version == host:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found:
        return found
    raise SetupError(
        f"the manifest asks for python={version!r} but no `python{version}` is on PATH (the "
        f"host runs {host}). Install Python {version}, or add a conda environment.yml with "
        f"`python={version}` to the package and install micromamba"
    )


def _bin(prefix: Path, name: str) -> Path:
    return prefix / ("Scripts" if os.name == "nt" else "bin") / name


_BUILD_JUNK = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")


def _pip_args(m: EnvManifest, build_dir: Path) -> list[str]:
    """pip arguments; local folders are installed from copies under `build_dir`, so a
    build never writes into the package folder (nor changes its hash)."""
    args = []
    for r in m.pip:
        if r.startswith("."):
            src = (m.root / r).resolve()
            args.append(str(build_dir / src.name) if src.is_dir() else str(src))
        else:
            args.append(r)
    if m.requirements:
        args += ["-r", str(m.root / m.requirements)]
    return args + list(RUNTIME_REQUIREMENTS)


def _copy_local_deps(m: EnvManifest, build_dir: Path) -> None:
    for r in m.pip:
        src = (m.root / r).resolve()
        if r.startswith(".") and src.is_dir():
            shutil.copytree(src, build_dir / src.name, ignore=_BUILD_JUNK, dirs_exist_ok=True)


def plan_setup(m: EnvManifest, prefix: Path, conda: str | None = None) -> list[list[str]]:
    """The commands that build the interpreter (the setup script comes after them).

    `conda`: the conda-like executable to use (found on PATH when None and needed).
    """
    python = str(_bin(prefix, "python"))
    if m.conda:
        conda = conda or find_conda()
        if conda is None:
            raise SetupError(
                f"package {m.name!r} declares conda dependencies ({m.conda}) but none of "
                f"{list(CONDA_EXECUTABLES)} is on PATH; {CONDA_INSTALL_HINT}"
            )
        env_file = str(m.root / m.conda)
        if Path(conda).name.startswith("conda"):
            create = [conda, "env", "create", "--prefix", str(prefix), "--file", env_file]
        else:  # micromamba and mamba share the `create -f` form
            create = [conda, "create", "--yes", "--prefix", str(prefix), "--file", env_file]
        first = [create]
    else:
        first = [[find_python(m.python), "-m", "venv", str(prefix)]]
    pip = [python, "-m", "pip", "install", "--no-compile", *_pip_args(m, _build_dir(prefix))]
    return first + [pip]


def _build_dir(prefix: Path) -> Path:
    return prefix.with_name(prefix.name + ".build")


def _run_logged(cmd: list[str], log: Path, cwd: Path, env: dict, timeout_s: float) -> None:
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        start = f.tell()
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout_s)  # fmt: skip
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            rc = f"timeout after {timeout_s:g}s"
        except OSError as e:
            rc = f"could not start: {e}"
    if rc != 0:
        with log.open() as f:
            f.seek(start)
            tail = f.read().splitlines()[-TAIL_LINES:]
        raise SetupError(
            f"set-up command failed ({rc}):\n  $ {' '.join(cmd)}\nlast {len(tail)} lines of "
            f"output:\n" + "\n".join(f"    {x}" for x in tail) + f"\nfull log: {log}"
        )


def _write_pth(m: EnvManifest, python: Path, runtime: Path) -> None:
    """Make `arborl.envs` and the package folder importable inside the interpreter."""
    runtime.mkdir(parents=True, exist_ok=True)
    link = runtime / "arborl"
    if not link.exists():
        link.symlink_to(_arborl_package_dir(), target_is_directory=True)
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    site = Path(out.stdout.strip())
    (site / "arborl_runtime.pth").write_text(f"{runtime}\n{m.root}\n")


def _script_cmd(m: EnvManifest, python: Path) -> list[str]:
    script = str(m.root / m.setup_script)
    return [str(python), script] if script.endswith(".py") else ["bash", script]


def _stamp_ok(prefix: Path, key: str) -> bool:
    try:
        return json.loads((prefix / STAMP).read_text())["hash"] == key
    except (OSError, ValueError, KeyError):
        return False


def setup_env(
    m: EnvManifest, force: bool = False, timeout_s: float = 1800.0, log=print
) -> Interpreter:
    """Build (or find already built) the isolated interpreter of package `m`.

    Two set-ups of the same package (two shells, or parallel test workers) take turns on
    `<prefix>.lock`: the second waits, then finds the first's build and returns it."""
    prefix = prefix_for(m)
    with _setup_lock(prefix, m.name, log):
        return _setup_env(m, prefix, force, timeout_s, log)


@contextlib.contextmanager
def _setup_lock(prefix: Path, name: str, log):
    """Hold an exclusive `flock` on `<prefix>.lock` (released when the process dies)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.with_name(prefix.name + ".lock"), "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"{name}: another set-up of this package is running; waiting for it")
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        yield


def _setup_env(m: EnvManifest, prefix: Path, force: bool, timeout_s: float, log) -> Interpreter:
    key = setup_hash(m)
    python = _bin(prefix, "python")
    backend = Path(find_conda() or "conda").name if m.conda else "venv"
    interp = Interpreter(prefix, python, backend, m)
    if not force and _stamp_ok(prefix, key) and python.exists():
        log(f"{m.name}: already set up at {prefix} (manifest hash {key[:12]})")
        return interp
    commands = plan_setup(m, prefix)  # raises first when conda is needed but absent
    if prefix.exists():
        shutil.rmtree(prefix)  # a partial or stale build
    prefix.parent.mkdir(parents=True, exist_ok=True)
    interp.log.write_text(f"# arborl env setup {m.name} {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)  # the host's path must not leak into the build
    build_dir = _build_dir(prefix)
    shutil.rmtree(build_dir, ignore_errors=True)
    _copy_local_deps(m, build_dir)
    try:
        for cmd in commands:
            log(f"{m.name}: $ {' '.join(cmd)}")
            _run_logged(cmd, interp.log, m.root, env, timeout_s)
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    if not python.exists():
        raise SetupError(
            f"{m.name}: no Python at {python} after set-up; a conda environment.yml must list "
            f"`python` and `pip`. Log: {interp.log}"
        )
    _write_pth(m, python, prefix / "arborl-runtime")
    if m.setup_script:
        cmd = _script_cmd(m, python)
        log(f"{m.name}: $ {' '.join(cmd)}")
        senv = {**env, "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
                "ARBORL_ENV_PREFIX": str(prefix), "VIRTUAL_ENV": str(prefix)}  # fmt: skip
        _run_logged(cmd, interp.log, m.root, senv, timeout_s)
    stamp = {"hash": key, "backend": backend, "python": str(python), "commands": commands}
    (prefix / STAMP).write_text(json.dumps(stamp, indent=2))
    log(f"{m.name}: set up at {prefix} (log {interp.log})")
    return interp


def interpreter_for(env_id: str) -> Interpreter | None:
    """The set-up interpreter of the package providing `env_id`; None for a plain env.

    Raises when the package exists but was not set up (or its manifest changed since).
    """
    m = package_of(env_id)
    if m is None:
        return None
    prefix = prefix_for(m)
    python = _bin(prefix, "python")
    if not (_stamp_ok(prefix, setup_hash(m)) and python.exists()):
        raise SetupError(
            f"env {env_id!r} comes from package {m.name!r}, whose interpreter is not set up "
            f"for the current manifest; run `arborl env setup {env_id}` first"
        )
    backend = json.loads((prefix / STAMP).read_text()).get("backend", "venv")
    return Interpreter(prefix, python, backend, m)
