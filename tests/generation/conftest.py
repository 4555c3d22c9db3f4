"""A real uvicorn server for arborl serve's app, in a thread on a free 127.0.0.1 port."""

import socket
import threading
import time

import pytest
import uvicorn
from transformers import LlamaConfig, LlamaForCausalLM

from arborl.generation import HFBackend
from arborl.generation.server import create_app
from arborl.models import load_policy
from arborl.models.bpe import build_gpt2_bpe_tokenizer
from arborl.models.loading import seeded

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
    """A random-init 4M-parameter Llama over GPT-2's real BPE vocabulary + ChatML."""
    tok = build_gpt2_bpe_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with seeded(0):
        model = LlamaForCausalLM(config).eval()
    return model, tok


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
