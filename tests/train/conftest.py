"""Shared fixtures of the trainer tests."""

import pytest


@pytest.fixture
def pool_mode_spy(monkeypatch):
    """Records `(mode, kwargs)` of every pool the rollout loop and the trainer build,
    and builds each in-process instead (fast); the list it returns fills as they are made."""
    import arborl.rollout.loop as loop
    import arborl.train.build as build

    modes = []
    real = loop.make_pool

    def spy(env_id, n, mode, **kw):
        modes.append((mode, kw))
        return real(env_id, n, "inproc", **kw)

    monkeypatch.setattr(loop, "make_pool", spy)
    monkeypatch.setattr(build, "make_pool", spy)
    return modes
