"""Shared Ray set-up: one local Ray instance per test module (start-up costs ~3 s), and
the workers import arborl from this same virtualenv (no runtime_env copy)."""

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    from arborl.envs.remote.ray_pool import init_local_ray

    init_local_ray(num_cpus=2, log_to_driver=False)  # workers at the test's priority
    yield ray
    ray.shutdown()
