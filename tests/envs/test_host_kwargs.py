"""Env kwargs that size work are bounded whatever their JSON number type (issue 34, review-2
defect 8: `{"size": 1e300}` passed `--max-kwarg-int`, then the first reset was a 500)."""

from __future__ import annotations

import math

import pytest

from arborl.envs.remote.host import EnvHost, HostError
from tests.envs import test_http_server as base
from tests.envs.test_http_server import AUTH

server, client = base.server, base.client  # a live server on 127.0.0.1 (arborl/Maze-v0)


@pytest.mark.parametrize("size", [1e300, 1000.0, -1e9, math.inf, -math.inf, math.nan])
def test_a_float_over_the_limit_is_refused_like_an_int(size):
    host = EnvHost("arborl/Maze-v0", b"secret", max_kwarg_int=256)
    for kwargs in ({"size": size}, {"nested": {"n": [size]}}):
        with pytest.raises(HostError) as e:
            host.create(kwargs)
        assert e.value.status == 400 and e.value.kind == "kwargs_limit"
        assert "--max-kwarg-int" in e.value.detail
    assert not host.sessions


def test_a_float_for_an_int_parameter_is_400_at_create_not_500_at_reset():
    host = EnvHost("arborl/Maze-v0", b"secret")
    for size in (7.5, 7.0):
        with pytest.raises(HostError) as e:
            host.create({"size": size})
        assert e.value.status == 400 and e.value.kind == "bad_kwargs"
        assert f"kwargs.size={size!r}" in e.value.detail and "integer" in e.value.detail
    sid = host.create({"size": 7, "wall_prob": 0.25})["session_id"]  # a float parameter: fine
    host.call(sid, "reset", {"seed": 0})


def test_over_http(client):
    for body, kind in (({"size": 1e300}, "kwargs_limit"), ({"size": 7.5}, "bad_kwargs")):
        r = client.post("/sessions", json=body, headers=AUTH)
        assert r.status_code == 400 and r.json()["error"] == kind, r.text
