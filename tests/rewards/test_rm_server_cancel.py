"""`arborl rm serve` stops scoring for a client that has gone and bounds how long one request
holds the model (issue 34, review-2 defect 4: the same one-lock pattern as `arborl serve`).
A real uvicorn server on 127.0.0.1 around a real tiny `RewardModel`; the checks are on how
the abandoned scoring ended, not on this machine's speed (tests/serving/_hang_up.py)."""

from __future__ import annotations

import time

import httpx
import pytest

from arborl.data.trajectory import Step, Trajectory
from arborl.rewards.reward_model import RewardModel
from arborl.rewards.rm_server import create_app
from tests.serving._hang_up import Spy, hang_up_once_started
from tests.serving._openapi_fuzz import serve_in_thread

TOKEN = "rm-token"


def _trajectories(num: int) -> list[dict]:
    steps = [Step(observation="o" * 300, action="a" * 20) for _ in range(2)]
    return [Trajectory(f"t{i}", "e", instruction="go " * 20, steps=steps).to_dict()
            for i in range(num)]  # fmt: skip


# 1000 trajectories of 512 tokens, one per forward pass: minutes of CPU on two cores (0.1 to
# 0.3 s a pass here), far more than can run between the server starting them and the
# client hanging up; the old server made the next client wait for all of it.
BIG = {"trajectories": _trajectories(1000), "batch_size": 1}
SMALL = {"trajectories": _trajectories(1), "last_only": True}


@pytest.fixture(scope="module")
def model():
    """The reward model; `model.spy` says how each `score_steps` call (BIG's) ended."""
    rm = RewardModel.from_spec("tiny-0.1m", "prm", max_length=512, seed=2)
    rm.spy = Spy(rm, "score_steps")
    return rm


def _serve(model, **kw):
    app = create_app(model, TOKEN, **kw)
    with serve_in_thread(app) as url:

        def post(body: dict, timeout: float) -> httpx.Response:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            return httpx.post(f"{url}/v1/score", json=body, headers=auth, timeout=timeout)

        post.url = url
        assert post(SMALL, timeout=120).status_code == 200  # warm up
        yield post


@pytest.fixture(scope="module")
def post(model):
    yield from _serve(model, max_request_s=600)


@pytest.fixture(scope="module")
def post_1s(model):
    yield from _serve(model, max_request_s=1)


@pytest.mark.fault("abandoned client")
def test_a_client_that_disconnects_frees_the_model(post, model):
    hang_up_once_started(post.url, "/v1/score", BIG, TOKEN, model.spy)
    t0 = time.monotonic()
    r = post(SMALL, timeout=600)  # queued behind the abandoned scoring
    waited = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert model.spy.ends == ["disconnected"], (
        f"the abandoned scoring ended {model.spy.ends}: the next client waited {waited:.1f} s "
        "for a request nobody reads"
    )


@pytest.mark.fault("abandoned client")
def test_a_request_over_the_deadline_is_504_naming_the_limit(post_1s, model):
    model.spy.reset()
    r = post_1s(BIG, timeout=600)
    assert r.status_code == 504, r.text[:300]
    assert model.spy.ends == ["deadline"]
    err = r.json()["error"]
    assert err["type"] == "request_timeout"
    assert "limit of 1 s" in err["message"] and "rm serve --max-request-s" in err["message"]
    assert post_1s(SMALL, timeout=60).status_code == 200  # the model is free again


def test_max_request_s_must_not_be_negative(model):
    with pytest.raises(ValueError, match="max_request_s=-1"):
        create_app(model, TOKEN, max_request_s=-1)
