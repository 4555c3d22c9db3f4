"""The agent program of tests/envs/test_tasklist.py: one model call, then an answer."""

from __future__ import annotations

import openai


def lookup_agent(task: dict, base_url: str, api_key: str) -> str:
    """Asks the model once, then answers from the row's hidden data on even episodes (a
    win) and "0" on odd ones (a loss), so every group has a learning signal."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    msgs = [{"role": "user", "content": task["observation"]}]
    client.chat.completions.create(model="policy", messages=msgs, max_tokens=3)
    row = task["data"]  # the task file's row: prompt, data, answer, id, split
    (price,) = row["data"]["prices"].values()
    return str(price) if task["episode"] % 2 == 0 else "0"
