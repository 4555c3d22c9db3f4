"""Agent programs the agent-mode tests run (found by `agent_program.fn` entry points)."""

from __future__ import annotations

import asyncio
import time

import openai

MODEL = "policy"


def _ask(client: openai.OpenAI, text: str, tokens: int = 6) -> str:
    msgs = [{"role": "user", "content": text}]
    return (
        client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=tokens)
        .choices[0]
        .message.content
    )


def parity_agent(task: dict, base_url: str, api_key: str) -> float:
    """Two calls; reward 1 when the second reply has an even length (a coin the policy
    can learn to bias)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    first = _ask(client, task["observation"][:60])
    second = _ask(client, f"again: {first}")
    return float(len(second) % 2 == 0)


def mixed_agent(task: dict, base_url: str, api_key: str):
    """Behaviour by episode: 0 fine, 1 crash, 2 hang, 3 no reward, 4 an answer the env
    grades, 5 a dict reward; every one calls the model first."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    _ask(client, task["observation"][:40], tokens=3)
    kind = task["episode"] % 6
    if kind == 1:
        raise RuntimeError("the agent's tool broke")
    if kind == 2:
        time.sleep(60)  # past timeout_s; its thread is abandoned
        _ask(client, "too late", tokens=2)  # the session is closed by now: 410
    if kind == 3:
        return None
    if kind == 4:
        return "answer[0]"
    if kind == 5:
        return {"reward": 0.5}
    return 1.0


async def async_agent(task: dict, base_url: str, api_key: str) -> float:
    """The async client; episode 1 hangs (cancelled at the deadline)."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    msgs = [{"role": "user", "content": task["observation"][:40]}]
    r = await client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4)
    if task["episode"] == 1:
        await asyncio.sleep(60)
    return float(len(r.choices[0].message.content) % 2 == 0)


def score_calls(task: dict, result, calls: list[dict]) -> float:
    """An `agent_program.reward`: the number of calls the episode made."""
    return float(len(calls))


def _one_call(task: dict, base_url: str, api_key: str) -> None:
    _ask(openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0), "hi", tokens=2)


async def deaf_agent(task: dict, base_url: str, api_key: str) -> float:
    """Episode 0 retries forever and swallows every cancel (`except BaseException`, as a
    hand-made retry loop does); episode 1 blocks its loop (`time.sleep`); others return 1."""
    _one_call(task, base_url, api_key)
    if task["episode"] % 2 == 0:
        while True:
            try:
                await asyncio.sleep(0.2)
            except BaseException:  # noqa: BLE001, S110 - the fault under test
                pass
    time.sleep(60)
    return 1.0


def bad_number_agent(task: dict, base_url: str, api_key: str):
    """A reward that is no float: by episode, 10**400, NaN, inf, 1e7, then a sound 0.5."""
    _one_call(task, base_url, api_key)
    return [10**400, float("nan"), float("-inf"), 1e7, {"reward": 10**400}, 0.5][
        task["episode"] % 6
    ]


def nan_agent(task: dict, base_url: str, api_key: str) -> float:
    """NaN on odd episodes, 1.0 on even ones."""
    _one_call(task, base_url, api_key)
    return float("nan") if task["episode"] % 2 else 1.0


def big_reward(task: dict, result, calls: list[dict]):
    """An `agent_program.reward` that returns a number past float: 10**400."""
    return 10**400
