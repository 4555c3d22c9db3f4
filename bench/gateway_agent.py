"""The task and the agent of `bench/gateway_learning.py`: one calculator call, then the answer.

The task (`EasyCalcEnv`, registered by the bench as `bench/EasyCalc-v0`) is ToolQA with
one-step questions, "What is 27 + 45?" (operands 10-49, so every question, expression and
sum has the same length: what a 0.1M-parameter model can learn to copy by position). The model does not do the arithmetic; it must call the calculator with the
expression copied from the question, then reply with the number the tool returned. The agent (`run`) is the
OpenAI Agents SDK calculator agent of docs/agents.md, unchanged but for its tool's output
format; its answer goes to the env as `answer[...]`, so the env grades it.

`respond` is the demonstrator of the SFT start (`arborl.train.agent_sft`): it reads the
prompt the gateway rendered and writes what a good policy would, a `<tool_call>` with the
question's expression, then, once a `<tool_response>` is there, its number.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from arborl.envs.builtin._safe_calc import evaluate, format_number
from arborl.envs.builtin.toolqa import ToolQAEnv
from arborl.envs.splits import sample_in_split

set_tracing_disabled(True)  # keep the SDK's traces on this machine

ENV_ID = "bench/EasyCalc-v0"


class EasyCalcEnv(ToolQAEnv):
    """ToolQA with one-step questions: `What is A + B?`, A and B in 10..49."""

    env_id = ENV_ID
    default_max_turns = 4

    def _sample_task(self, rng: random.Random, split: str) -> dict[str, Any]:
        def draw(r: random.Random) -> dict[str, Any]:
            expr = f"{r.randint(10, 49)} + {r.randint(10, 49)}"
            return {"question": f"What is {expr}?", "answer": evaluate(expr), "steps": [expr]}

        return sample_in_split(rng, split, draw)


@function_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12 * 4."""
    return format_number(evaluate(expression))


async def run(task: dict, base_url: str, api_key: str) -> str:
    # closed here, inside the episode's event loop (an unclosed client warns at exit)
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        model = OpenAIChatCompletionsModel(model="policy", openai_client=client)
        agent = Agent(
            name="solver",
            instructions="Use the calculator, then reply with the number only.",
            tools=[calculator],
            model=model,
        )
        result = await Runner.run(agent, task["observation"], max_turns=3)
    return f"answer[{str(result.final_output).strip()}]"


_QUESTION = re.compile(r"What is (\d+ [-+*] \d+)\?")
_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)


def respond(prompt: str) -> str:
    """The demonstrator: a calculator call with the question's expression; after the tool's
    response, that response."""
    results = _RESPONSE.findall(prompt)
    if results:
        return results[-1]
    question = _QUESTION.findall(prompt)
    if not question:
        raise ValueError(f"no question in the prompt: {prompt[-200:]!r}")
    # " 27 + 45", space first: env-bpe then splits it into the question's own tokens
    call = {"name": "calculator", "arguments": {"expression": " " + question[-1]}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"
