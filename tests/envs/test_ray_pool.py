"""The `ray` mode: env instances in Ray actors with fractional CPUs, same pool interface."""

from __future__ import annotations

import os

import pytest

from arborl.envs import EnvPool, check_env, make_pool

from ._pkg import *  # noqa: F403
from ._pkg import COUNTER_ID
from ._pool_protocol import check_pool_protocol

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray cluster start costs ~15 s on a busy 2-core box


@pytest.fixture(scope="module")
def ray_cluster():
    from arborl.envs.remote.ray_pool import init_local_ray

    init_local_ray(num_cpus=2, log_to_driver=False)  # workers at the test's priority
    yield
    ray.shutdown()


def test_fractional_actors_same_results_and_check_env(ray_cluster):
    # 8 actors x 0.25 CPU fill exactly the 2 CPUs of the cluster: whole CPUs would not fit.
    pool = make_pool("arborl/Maze-v0", 8, mode="ray", num_workers=8, num_cpus_per_worker=0.25,
                     split="test")  # fmt: skip
    ref = EnvPool("arborl/Maze-v0", 8, split="test")
    try:
        assert ray.available_resources().get("CPU", 0.0) == 0.0
        assert pool.reset([3, 4, 5, 6], group_size=2) == ref.reset([3, 4, 5, 6], group_size=2)
        actions = ["up", "down", None, "left", "right", "x", "up", None]
        assert pool.step(actions) == ref.step(actions)
        assert check_env(pool[5], num_seeds=2) == []
    finally:
        pool.close()


def test_ray_pool_satisfies_the_pool_protocol(ray_cluster):
    pool = make_pool("arborl/Maze-v0", 4, mode="ray", num_workers=2, split="test")
    try:
        check_pool_protocol(pool)
    finally:
        pool.close()


def test_package_env_through_ray_actor(ray_cluster, counter_interp):
    # The actor runs in Ray's interpreter and forwards to a worker in the package's venv.
    pool = make_pool(COUNTER_ID, 2, mode="ray")
    try:
        assert check_env(pool[0], num_seeds=2) == []
        obs, _ = pool.reset([1, 2])
        res, _ = pool.step(["inc", "__raise__"])
        assert res[0].obs.startswith("value 1,") and "broke on purpose" in res[1].info["env_error"]
        assert pool.num_env_errors == 1
    finally:
        pool.close()


def test_local_ray_workers_run_at_the_drivers_priority(ray_cluster):
    """Ray's default worker niceness (15) starves the workers on any busy machine; the
    instances arborl starts run them at the driver's niceness."""
    import os

    @ray.remote
    def niceness() -> int:
        return os.nice(0)

    @ray.remote
    class Actor:
        def niceness(self) -> int:
            return os.nice(0)

    assert ray.get(niceness.remote()) == os.nice(0)
    assert ray.get(Actor.remote().niceness.remote()) == os.nice(0)


def test_a_local_ray_chooses_token_auth_so_ray_does_not_warn_on_every_start(tmp_path):
    """Ray warns 'Token authentication is enabled for this Ray cluster' whenever a local
    instance starts with RAY_AUTH_MODE unset; arborl sets the mode Ray would pick."""
    import subprocess
    import sys

    code = (
        "import os, ray\n"
        "from arborl.envs.remote.ray_pool import init_local_ray\n"
        "init_local_ray(num_cpus=1, log_to_driver=False)\n"
        "print('mode', os.environ['RAY_AUTH_MODE'])\n"
        "ray.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mode token" in done.stdout
    assert "Token authentication" not in done.stderr, done.stderr[-2000:]


def test_a_mode_the_user_set_is_kept(monkeypatch):
    from arborl.envs.remote import ray_pool

    seen = {}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(os.environ.copy()))
    ray_pool.init_local_ray(num_cpus=1)
    assert seen["RAY_AUTH_MODE"] == "disabled"
