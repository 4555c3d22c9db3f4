"""`arborl serve` stops work for a client that has gone and bounds how long one request holds
the model (issue 34, review-2 defect 4: the next client waited 72.8 s after the first gave up
at 3 s). A real uvicorn server on 127.0.0.1 around a real `HFBackend`.

The checks are on events, not on how fast this machine is (review 3 #14: a time bound let a
fast machine pass a server without cancellation): the client hangs up once the server has
started generating for it, and the backend records how each generation ended. The model
takes one request at a time, so when the next client's answer arrives the abandoned
generation has ended; it must have ended `disconnected`, never `finished`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from arborl.generation import HFBackend
from arborl.generation.server import create_app
from tests.generation.conftest import API_KEY
from tests.serving._hang_up import Spy, hang_up_once_started
from tests.serving._openapi_fuzz import serve_in_thread

AUTH = {"Authorization": f"Bearer {API_KEY}"}
# Greedy decoding of tiny-0.1m never meets EOS on this prompt, so every row runs its full
# 1000 tokens: 256 rows (the default `max_rows`) are 256,000 decode-row steps, far more
# than can run between the server starting them and the client hanging up.
BIG = {"prompt": ["hi", "hi"], "max_tokens": 1000, "n": 128, "temperature": 0}
SMALL = {"prompt": "hi", "max_tokens": 2}


@dataclass
class Served:
    url: str
    spy: Spy
    """On the backend's `generate`: how each generation ended."""

    def post(self, body: dict, timeout: float, path: str = "completions") -> httpx.Response:
        return httpx.post(f"{self.url}/v1/{path}", json=body, headers=AUTH, timeout=timeout)


def _serve(policy, **kw) -> Iterator[Served]:
    model, tok = policy
    backend = HFBackend(model, tok)
    app = create_app(backend, tok, "tiny-0.1m", api_key=API_KEY, **kw)
    with serve_in_thread(app) as url:
        served = Served(url, Spy(backend, "generate"))
        assert served.post(SMALL, timeout=120).status_code == 200  # warm up (the first is slow)
        yield served


@pytest.fixture(scope="module")
def served(served_policy):
    yield from _serve(served_policy, max_request_s=600)


@pytest.fixture(scope="module")
def served_1s(served_policy):
    yield from _serve(served_policy, max_request_s=1)


@pytest.mark.fault("abandoned client")
@pytest.mark.parametrize("path", ["completions", "chat/completions"])
def test_a_client_that_disconnects_frees_the_model(served, path):
    body = dict(BIG)
    if path == "chat/completions":
        body["messages"] = [{"role": "user", "content": body.pop("prompt")[0]}]
    hang_up_once_started(served.url, f"/v1/{path}", body, API_KEY, served.spy)
    t0 = time.monotonic()
    r = served.post(SMALL, timeout=600)  # queued behind the abandoned generation
    waited = time.monotonic() - t0
    assert r.status_code == 200, r.text
    # the abandoned generation ended before the next one ran, and not by finishing
    assert served.spy.ends == ["disconnected", "finished"], (
        f"generations ended {served.spy.ends}: the next client waited {waited:.1f} s for "
        "a request nobody reads"
    )


@pytest.mark.fault("abandoned client")
def test_a_request_over_the_deadline_is_504_naming_the_limit(served_1s):
    served_1s.spy.reset()
    r = served_1s.post(BIG, timeout=600)
    assert r.status_code == 504, r.text[:300]
    assert served_1s.spy.ends == ["deadline"]
    err = r.json()["error"]
    assert err["type"] == "request_timeout"
    assert "limit of 1 s" in err["message"] and "--max-request-s" in err["message"]
    assert served_1s.post(SMALL, timeout=60).status_code == 200  # the model is free again


def test_max_request_s_must_not_be_negative(served_policy):
    model, tok = served_policy
    with pytest.raises(ValueError, match="max_request_s=-1"):
        create_app(HFBackend(model, tok), tok, "m", max_request_s=-1)
