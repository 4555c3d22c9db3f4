"""`arborl serve`'s limits and auth (issue 19, review defects 2 and 11, the auth notes): every
request that sizes work is checked before any allocation, bad input is a 4xx, never a 500."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from arborl.generation import HFBackend, SamplingParams
from tests.generation.conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}


def _post(url: str, raw: bytes | str, headers: dict = AUTH) -> httpx.Response:
    raw = raw.encode() if isinstance(raw, str) else raw
    return httpx.post(f"{url}/completions", content=raw, headers=headers, timeout=60)


def test_huge_max_tokens_is_400_before_any_allocation(server_url):
    rss = psutil.Process().memory_info().rss
    t0 = time.monotonic()
    r = _post(server_url, '{"prompt": "hi", "max_tokens": 100000000, "n": 4}')
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert "max_tokens=100000000" in msg and "limit of 1024" in msg  # tiny-0.1m: 1024 positions
    assert time.monotonic() - t0 < 5 and psutil.Process().memory_info().rss - rss < 50 << 20
    r = _post(server_url, '{"prompt": ["a", "b", "c"], "max_tokens": 2, "n": 100}')
    assert r.status_code == 400 and "300 sequences" in r.json()["error"]["message"]


def test_backend_clamps_max_new_tokens_before_allocating(served_policy):
    # hf.py filled a rows x max_new_tokens float tensor first: 10**10 asked for 40 GB.
    model, tok = served_policy
    out = HFBackend(model, tok).generate([[1, 2]], SamplingParams(max_new_tokens=10**10, seed=0))
    assert 1 <= len(out[0].token_ids) <= 1022


@pytest.mark.parametrize(
    "body",
    [
        '{"prompt": [1000000], "max_tokens": 2}',  # token id out of the vocabulary
        '{"prompt": [-5], "max_tokens": 2}',
        '{"prompt": "\\ud800", "max_tokens": 2}',  # a lone surrogate
    ],
)
def test_bad_prompts_are_400(server_url, body):
    r = _post(server_url, body)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_sampling_values_are_422(server_url, value):
    for field in ("temperature", "top_p"):
        r = _post(server_url, f'{{"prompt": "hi", "max_tokens": 2, "{field}": {value}}}')
        assert r.status_code == 422 and field in r.json()["error"]["message"], r.text


def test_auth_comes_before_the_body_and_covers_docs(server_url):
    assert _post(server_url, b"{not json", {}).status_code == 401  # was 422: parsed first
    base = server_url.removesuffix("/v1")
    assert httpx.get(f"{base}/openapi.json").status_code == 401
    assert httpx.get(f"{base}/health").status_code == 200
    lower = {"Authorization": f"bearer {API_KEY}"}
    assert httpx.get(f"{server_url}/models", headers=lower).status_code == 200


def _serve(*flags: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "arborl.cli.main", "serve", "tiny-0.1m", "--port", "0", *flags]
    env = {k: v for k, v in (env or os.environ).items() if k != "ARBORL_API_KEY"}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip


def test_serve_refuses_a_public_host_without_a_key_and_warns_on_loopback():
    proc = _serve("--host", "0.0.0.0")
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the old code served on 0.0.0.0 without a key
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and "--api-key" in err and "0.0.0.0" in err
    proc = _serve()
    try:
        line = proc.stderr.readline()
        assert "WARNING" in line and "no API key" in line
    finally:
        proc.kill()
        proc.wait(timeout=20)
        proc.stderr.close()


def test_subnormal_temperature_with_logprobs_is_not_a_500(server_url):
    # Found by tests/serving/test_fuzz.py: T=2.2e-311 overflowed logits / T, and the NaN
    # logprobs could not be written as JSON.
    r = _post(
        server_url,
        '{"prompt": "0", "temperature": 2.225073858507e-311, "logprobs": 0, "max_tokens": 3}',
    )
    assert r.status_code == 200, r.text
    lps = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    assert len(lps) >= 1 and all(v is None or v <= 0 for v in lps)


def test_a_forged_pickle_body_runs_nothing(server_url, tmp_path):
    # Requirement 2: nothing a client sends is unpickled; a pickle body is just bad JSON.
    import base64
    import pickle

    from tests.envs.test_http_security import _Marker

    marker = tmp_path / "RAN"
    blob = pickle.dumps(_Marker(str(marker)))
    for body in (blob, f'{{"prompt": "{base64.b64encode(blob).decode()}", "max_tokens": 1}}'):
        assert _post(server_url, body).status_code in (200, 400, 422)
    assert _post(server_url, blob).status_code in (400, 422) and not marker.exists()
