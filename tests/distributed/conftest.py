"""Shared Ray set-up: one local Ray instance per test module (start-up costs ~3 s), and
the workers import arborl from this same virtualenv (no runtime_env copy); and
`ray_cluster`, a cluster of several `ray start` nodes on this machine."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    from arborl.envs.remote.ray_pool import init_local_ray

    init_local_ray(num_cpus=2, log_to_driver=False)  # workers at the test's priority
    yield ray
    ray.shutdown()


class LocalNode:
    """One `ray start --block` node of a `LocalCluster`: its process (the leader of a
    session of its own, so teardown can find every process it started), node id, raylet."""

    def __init__(self, proc: subprocess.Popen, log: Path) -> None:
        self.proc, self.log = proc, log
        raylet = next(
            c for c in psutil.Process(proc.pid).children(recursive=True) if c.name() == "raylet"
        )
        self.raylet_pid = raylet.pid
        node_id = [a for a in raylet.cmdline() if a.startswith("--node_id=")]
        self.node_id = node_id[0].split("=", 1)[1]

    def processes(self) -> list[psutil.Process]:
        """Every live process of this node's session (raylet, GCS, agents, Ray workers)."""
        out = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == self.proc.pid:
                    out.append(p)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return out


class LocalCluster:
    """A Ray cluster of several nodes on this machine, as `ray start` builds one on several
    machines (the commands of docs/distributed.md, "Two machines"): each node is its own
    raylet with its own CPUs, custom resources and temp dir; every port is a free one, so
    clusters of parallel tests do not meet."""

    def __init__(self, root: Path) -> None:
        self.root, self.nodes, self.port = root, [], _free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Ray declares a silent node dead after 3 missed 0.5 s health checks (default 5 x 3 s)
        self.env = {
            **os.environ, "RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0",
            "RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
            "RAY_health_check_timeout_ms": "500", "RAY_health_check_failure_threshold": "3",
        }  # fmt: skip

    def command(self, num_cpus: int, resources: dict) -> list[str]:
        """`ray start` for the next node: the head first, then nodes joining its address."""
        name = f"n{len(self.nodes)}"
        ports = ("node-manager", "object-manager", "dashboard-agent-listen",
                 "dashboard-agent-grpc", "metrics-export", "runtime-env-agent")  # fmt: skip
        cmd = [
            str(Path(sys.executable).parent / "ray"), "start", "--block",
            f"--num-cpus={num_cpus}", f"--resources={json.dumps(resources)}",
            f"--temp-dir={self.root / name}", "--disable-usage-stats",
            *(f"--{p}-port={_free_port()}" for p in ports),
        ]  # fmt: skip
        if self.nodes:  # one log monitor per host, as Ray asks (else logs come twice)
            return [*cmd, f"--address={self.address}", "--include-log-monitor=false"]
        return [*cmd, "--head", f"--port={self.port}", "--include-dashboard=false",
                f"--dashboard-port={_free_port()}", f"--ray-client-server-port={_free_port()}"]  # fmt: skip

    def add_node(self, num_cpus: int, resources: dict, timeout_s: float = 120.0) -> LocalNode:
        log = self.root / f"n{len(self.nodes)}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                self.command(num_cpus, resources), stdout=out, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while "Ray runtime started" not in log.read_text():
            assert proc.poll() is None, f"ray start exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, (
                f"no node after {timeout_s:.0f} s:\n{log.read_text()}"
            )
            time.sleep(0.2)
        node = LocalNode(proc, log)
        self.nodes.append(node)
        return node

    def kill(self, node: LocalNode) -> None:
        """kill -9 every process of `node` (raylet, agents, Ray workers), as a machine dies."""
        for p in node.processes():
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.proc.wait(timeout=10)

    def stop(self) -> None:
        """Kill every node (never `ray stop`: it stops every Ray instance on the machine,
        other tests' included)."""
        for node in reversed(self.nodes):
            self.kill(node)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster():
    """An empty `LocalCluster` (add nodes with `add_node`), stopped at teardown. Its temp
    dir is short (Ray's socket paths must fit 107 bytes), not under tmp_path."""
    ray = pytest.importorskip("ray")
    # A driver already connected elsewhere would be reused by the run (init_ray keeps it)
    assert not ray.is_initialized(), "Ray is still initialized in this process by another test"
    root = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    cluster = LocalCluster(root)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
