"""`arborl env dockerfile ID`: a build context whose image serves the env over HTTP.

The image reproduces `arborl env setup`: the same base Python (or a micromamba base with
the package's `environment.yml`), the same pip requirements plus the server runtime, the
same setup script, then starts the HTTP env server on port 8000. The context holds a copy
of the package folder (`env/`) and of arborl's dependency-free env code
(`arborl-runtime/arborl/{__init__.py,registry.py,serving/,envs/}`; `arborl.registry` and
`arborl.serving`, the servers' auth and limits layer, are standard-library only), so the image needs neither arborl's
training stack nor network access to this repository.

    arborl env dockerfile me/Counter-v0 --out build/counter
    docker build -t counter build/counter
    docker run -e ARBORL_TOKEN=secret -p 8000:8000 counter
    make_pool("me/Counter-v0", 64, mode="http", urls=["http://HOST:8000"], token="secret")
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from arborl.envs.packages.isolate import RUNTIME_REQUIREMENTS
from arborl.envs.packages.manifest import EnvManifest

PORT = 8000
RUNTIME_MODULES = ("__init__.py", "registry.py")
"""The top-level modules of `arborl/` the env code imports (standard library only)."""
RUNTIME_PACKAGES = ("envs", "serving")
"""The packages of `arborl/` the env server runs on, copied whole."""
MICROMAMBA_IMAGE = "mambaorg/micromamba:1.5.10"
_IGNORE = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".git",
                                 ".arborl-docker", "*.pyc")  # fmt: skip


def _quote(args: list[str]) -> str:
    return " ".join(json.dumps(a) if any(c in a for c in " <>=|&;$\"'") else a for a in args)


def dockerfile_text(m: EnvManifest, env_id: str) -> str:
    """The Dockerfile for package `m` serving `env_id` (paths are inside the context)."""
    e = m.env(env_id)
    spec = {"id": e.id, "entry_point": e.entry_point, "kwargs": e.kwargs,
            "max_turns": e.max_turns, "description": e.description}  # fmt: skip
    py = "/opt/env/bin/python"
    pip = [f"/env/{r[2:] if r.startswith('./') else r}" if r.startswith(".") else r for r in m.pip]
    if m.requirements:
        pip += ["-r", f"/env/{m.requirements}"]
    pip += list(RUNTIME_REQUIREMENTS)
    version = m.python or f"{sys.version_info.major}.{sys.version_info.minor}"
    lines = [f"# Built by `arborl env dockerfile {env_id}` from package {m.name!r}.",
             "# docker run -e ARBORL_TOKEN=<token> -p 8000:8000 <image>"]  # fmt: skip
    if m.conda:
        lines += [f"FROM {MICROMAMBA_IMAGE}", "USER root",
                  "COPY env/ /env/", "COPY arborl-runtime/ /opt/arborl-runtime/",
                  f"RUN micromamba create --yes --prefix /opt/env --file /env/{m.conda} "
                  "&& micromamba clean --all --yes"]  # fmt: skip
    else:
        lines += [f"FROM python:{version}-slim",
                  "COPY env/ /env/", "COPY arborl-runtime/ /opt/arborl-runtime/",
                  "RUN python -m venv /opt/env"]  # fmt: skip
    lines += [f"RUN {py} -m pip install --no-cache-dir {_quote(pip)}",
              "ENV PATH=/opt/env/bin:$PATH PYTHONPATH=/opt/arborl-runtime:/env "
              "ARBORL_ENV_PREFIX=/opt/env VIRTUAL_ENV=/opt/env",
              f"ENV ARBORL_ENV_SPEC={json.dumps(json.dumps(spec))}", "WORKDIR /env"]  # fmt: skip
    if m.setup_script:
        run = "python" if m.setup_script.endswith(".py") else "bash"
        lines.append(f"RUN {run} /env/{m.setup_script}")
    health = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/health')"
    cmd = [py, "-m", "arborl.envs.remote.http_server", env_id, "--host", "0.0.0.0",
           "--port", str(PORT)]  # fmt: skip
    lines += [f"EXPOSE {PORT}",
              f"HEALTHCHECK --interval=10s --timeout=3s CMD {py} -c {json.dumps(health)}",
              f"CMD {json.dumps(cmd)}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_docker_context(m: EnvManifest, env_id: str, out_dir: str | Path) -> Path:
    """Write `Dockerfile`, `env/` and `arborl-runtime/` into `out_dir`; returns the Dockerfile."""
    out = Path(out_dir)
    root, target = m.root.resolve(), out.resolve()
    if target == root or root in target.parents:
        raise ValueError(
            f"--out {out} is inside the package folder {root}; the context copies that "
            "folder, so pick a directory outside it"
        )
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("env", "arborl-runtime"):
        shutil.rmtree(out / sub, ignore_errors=True)
    shutil.copytree(m.root, out / "env", ignore=_IGNORE)
    arborl_pkg = Path(__file__).resolve().parents[2]
    runtime = out / "arborl-runtime" / "arborl"
    runtime.mkdir(parents=True)
    for name in RUNTIME_MODULES:
        shutil.copy2(arborl_pkg / name, runtime / name)
    for name in RUNTIME_PACKAGES:
        shutil.copytree(arborl_pkg / name, runtime / name, ignore=_IGNORE)
    path = out / "Dockerfile"
    path.write_text(dockerfile_text(m, env_id))
    (out / ".dockerignore").write_text("**/__pycache__\n**/*.egg-info\n**/build\n")
    return path
