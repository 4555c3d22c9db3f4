"""A real uvicorn server for arborl serve's app, in a thread on a free 127.0.0.1 port; the
real vLLM venv's interpreter (built once per machine by `tools/setup_vllm.sh`)."""

import subprocess
from pathlib import Path

import pytest

from arborl.generation import HFBackend
from arborl.generation.server import create_app
from arborl.models import load_policy
from tests.serving._openapi_fuzz import serve_in_thread

API_KEY = "test-key"
MODEL_NAME = "tiny-0.1m"


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
    """The `bpe-tiny-0.1m` preset: a random-init Llama over GPT-2's real BPE + ChatML,
    as `arborl serve bpe-tiny-0.1m` builds it."""
    model, tok = load_policy("bpe-tiny-0.1m", seed=0)
    return model.eval(), tok


@pytest.fixture(scope="session")
def bpe_server_url(bpe_policy):
    yield from _serve(*bpe_policy)


def _serve(model, tok):
    app = create_app(HFBackend(model, tok), tok, MODEL_NAME, api_key=API_KEY)
    with serve_in_thread(app) as url:
        yield f"{url}/v1"


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The vLLM venv's python (`make vllm`; ~5 min on a new machine, cached under
    ~/.cache/arborl keyed by the script's hash). A failed build fails the test using it."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        ["bash", str(root / "tools" / "setup_vllm.sh")], capture_output=True, text=True
    )
    assert done.returncode == 0, f"building the vLLM venv failed:\n{done.stderr[-3000:]}"
    return str(Path(done.stdout.strip().splitlines()[-1]) / "bin" / "python")
