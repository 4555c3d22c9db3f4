"""A test env whose reset sleeps `options["sleep_s"]` seconds (or until `RELEASE` is set):
stands in for a hung or slow env call in the server-limit tests."""

from __future__ import annotations

import threading
import time

RELEASE = threading.Event()


class SlowEnv:
    """Minimal Env-shaped object; only what EnvHost calls."""

    max_turns = 3
    instruction = "wait"
    task = None

    def reset(self, seed=None, options=None):
        sleep_s = float((options or {}).get("sleep_s", 0))
        deadline = time.monotonic() + sleep_s
        while time.monotonic() < deadline and not RELEASE.is_set():
            time.sleep(0.02)
        return "ready", {}

    def step(self, action):
        return "ok", 0.0, False, False, {}

    def close(self):
        pass
