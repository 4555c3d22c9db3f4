"""A real uvicorn server for arborl serve's app, in a thread on a free 127.0.0.1 port."""

import socket
import threading
import time

import pytest
import uvicorn

from arborl.generation import HFBackend
from arborl.generation.server import create_app
from arborl.models import load_policy
from arborl.models.bpe import build_bpe_policy

API_KEY = "test-key"
MODEL_NAME = "tiny-0.1m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def served_policy():
    model, tok = load_policy(MODEL_NAME, seed=0)
    model.eval()
    return model, tok


@pytest.fixture(scope="session")
def server_url(served_policy):
    yield from _serve(*served_policy)


@pytest.fixture(scope="session")
def bpe_policy():
    """A random-init Llama over GPT-2's real BPE vocabulary + ChatML."""
    return build_bpe_policy(seed=0)


@pytest.fixture(scope="session")
def bpe_server_url(bpe_policy):
    yield from _serve(*bpe_policy)


def _serve(model, tok):
    app = create_app(HFBackend(model, tok), tok, MODEL_NAME, api_key=API_KEY)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start within 20 s")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)
