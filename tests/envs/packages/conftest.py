"""Fixtures shared by the env-package tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def local_ray():
    """A private local Ray instance for the module's Ray cases, started on first use."""
    ray = pytest.importorskip("ray")
    from arborl.envs.remote.ray_pool import init_local_ray

    if not ray.is_initialized():
        init_local_ray(num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()
