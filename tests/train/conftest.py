"""Shared fixtures of the trainer tests."""

import pytest


@pytest.fixture
def pool_mode_spy(monkeypatch):
    """Records `(mode, kwargs)` of every pool the rollout loop, the trainer and a run's
    `PoolSet` build, and builds each in-process instead (fast; the shared `workers` group a
    subprocess `PoolSet` hands its pools is left out of the kwargs and never started); the
    list it returns fills as they are made."""
    import arborl.envs.poolset as poolset
    import arborl.rollout.loop as loop
    import arborl.train.build as build

    modes = []
    real = loop.make_pool

    def spy(env_id, n, mode, **kw):
        kw.pop("workers", None)
        modes.append((mode, kw))
        return real(env_id, n, "inproc", **kw)

    monkeypatch.setattr(loop, "make_pool", spy)
    monkeypatch.setattr(build, "make_pool", spy)
    monkeypatch.setattr(poolset, "make_pool", spy)
    return modes
