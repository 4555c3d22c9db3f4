"""Shared Ray set-up: one local Ray instance per test module (start-up costs ~3 s), and
the workers import arborl from this same virtualenv (no runtime_env copy)."""

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
