"""Shared test set-up: tests run on a few shared CPU cores, so torch uses one thread."""

import time

import httpx
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def wait_for_health():
    """`wait(proc, url)`: poll `url/health` until 200; fail if `proc` dies or 60 s pass."""

    def wait(proc, url: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            err = proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else ""
            assert proc.poll() is None, f"server exited: {err}"
            assert time.monotonic() < deadline, f"{url} did not come up in {timeout_s:.0f} s"
            time.sleep(0.2)

    return wait
