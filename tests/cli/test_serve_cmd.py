"""`arborl serve` as a real subprocess, queried over HTTP."""

import os
import socket
import subprocess
import sys

import httpx
import pytest

from arborl.cli.main import build_parser


def test_serve_parser_defaults():
    args = build_parser().parse_args(["serve", "tiny-0.1m"])
    assert (args.host, args.port, args.api_key, args.max_batch_size) == (
        "127.0.0.1",
        8000,
        None,
        64,
    )


@pytest.mark.slow
def test_serve_subprocess_answers_completions(wait_for_health):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "arborl.cli.main",
        "serve",
        "tiny-0.1m",
        "--port",
        str(port),
        "--api-key",
        "k",
        "--seed",
        "1",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url, headers = f"http://127.0.0.1:{port}", {"Authorization": "Bearer k"}
        wait_for_health(proc, url)
        body = {"model": "tiny-0.1m", "prompt": "hi", "max_tokens": 3, "temperature": 0}
        resp = httpx.post(f"{url}/v1/completions", json=body, headers=headers, timeout=30)
        assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] <= 3
        assert httpx.post(f"{url}/v1/completions", json=body, timeout=30).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=20)
