"""Agent programs whose every episode errors (tests/e2e/test_loud_failures.py)."""

from __future__ import annotations

import time

import openai


def overlong(task: dict, base_url: str, api_key: str) -> float:
    """Sends a prompt longer than tiny-0.1m's 1023-token context: the gateway answers 400,
    the client raises, as a stock agent library's long system prompt does."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    msgs = [
        {"role": "system", "content": "You are a careful agent. " * 120},
        {"role": "user", "content": task["observation"]},
    ]
    client.chat.completions.create(model="policy", messages=msgs, max_tokens=4)
    return 1.0


def spinning(task: dict, base_url: str, api_key: str) -> float:
    """Runs torch for 20 s, past a short agent_program.timeout_s: its thread is still in
    torch when the run ends (what a timed-out agent waiting on a generation does)."""
    import torch

    a, end = torch.rand(256, 256), time.monotonic() + 20
    while time.monotonic() < end:
        a = torch.tanh(a @ a)
    return 1.0
