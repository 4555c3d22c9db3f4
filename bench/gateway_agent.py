"""The tasks and agents of `bench/gateway_learning.py`: one tool call, then the answer.

Two tasks, each an env (registered by the bench), an OpenAI Agents SDK agent run unmodified
against arborl's gateway (its final output goes to the env as `answer[...]`, so the env
grades it) and a demonstrator for the SFT start (`bench/agent_sft.py`), which reads the
prompt the gateway rendered and writes what a good policy would: the right `<tool_call>`,
then, once a `<tool_response>` is there, the tool's result.

- `lookup` (`LookupEnv`, `bench/Lookup-v0`, the bench's default): each task hides a table
  of the 4 names `NAMES` to 4 distinct codes drawn from `CODES` and asks "What is the code
  of blue?". The agent's `lookup(name)` tool reads the task's table, so the tool is needed;
  the model must copy one token from the question into the call, then one token from the
  tool's answer into its reply. Every name and code is one env-bpe token with and without
  a leading space, and every name is in every table, so a policy that copies the code but
  only guesses the name succeeds 1 time in 4: a start that sometimes succeeds.
- `easycalc` (`EasyCalcEnv`, `bench/EasyCalc-v0`): ToolQA with one-step questions,
  "What is 27 + 45?" (operands 10-49); the calculator agent of docs/agents.md. Two-digit
  copies that the 0.1M-parameter model did not learn (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from arborl.envs.base import TextEnv
from arborl.envs.builtin._safe_calc import evaluate, format_number
from arborl.envs.builtin.toolqa import ToolQAEnv
from arborl.envs.splits import sample_in_split, task_id_of

set_tracing_disabled(True)  # keep the SDK's traces on this machine

_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)


async def _run_agent(task: dict, base_url: str, api_key: str, instructions: str,
                     tool: Any) -> str:  # fmt: skip
    """One `Runner.run` of an agent with one tool; its final output as `answer[...]`."""
    # closed here, inside the episode's event loop (an unclosed client warns at exit)
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        model = OpenAIChatCompletionsModel(model="policy", openai_client=client)
        agent = Agent(name="solver", instructions=instructions, tools=[tool], model=model)
        result = await Runner.run(agent, task["observation"], max_turns=3)
    return f"answer[{str(result.final_output).strip()}]"


def _tool_call(name: str, arguments: dict[str, str]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _demonstrate(prompt: str, question: re.Pattern, tool: str, arg: str, missing: str) -> str:
    """A demonstrator's reply: the last `<tool_response>` once there is one, else a call of
    `tool` whose `arg` is the question's last match, written with a leading space."""
    results = _RESPONSE.findall(prompt)
    if results:
        return results[-1]
    found = question.findall(prompt)
    if not found:
        raise ValueError(f"{missing} in the prompt: {prompt[-200:]!r}")
    return _tool_call(tool, {arg: " " + found[-1]})


# --- lookup: copy a name into the call, the code into the answer ----------------------

LOOKUP_ID = "bench/Lookup-v0"
NAMES = ("red", "blue", "green", "yellow")
"""The names of every task's table (one env-bpe token each, with or without a space)."""
CODES = ("book", "lamp", "box", "apple", "table", "chair", "room", "soap", "paper")
"""The codes a table draws from (one env-bpe token each, with or without a space; not "hat",
which is a token of "What" in the question)."""

_LOOKUP_ACTION = re.compile(r"^\s*(lookup|answer)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


class LookupEnv(TextEnv):
    """Questions "What is the code of blue?" over a per-task hidden table: `lookup[<name>]`
    reads it, `answer[<code>]` ends the episode with reward 1 if it is the name's code."""

    env_id = LOOKUP_ID
    description = "Find the code of a name with the lookup tool, then give the code."
    action_format = "lookup[<name>] or answer[<code>]"
    default_max_turns = 4
    _state_attrs = ("table", "name", "looked_up", "answered", "correct")

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        super().__init__(split=split, max_turns=max_turns)
        self.table: dict[str, str] = {}
        self.name = ""
        self.looked_up = self.answered = self.correct = False

    def _sample_task(self, rng: random.Random, split: str) -> dict[str, Any]:
        def draw(r: random.Random) -> dict[str, Any]:
            return {"table": dict(zip(NAMES, r.sample(CODES, len(NAMES)))), "name": r.choice(NAMES)}

        return sample_in_split(rng, split, draw)

    def _task_id(self, task: dict[str, Any]) -> str:
        return task_id_of(task)

    def _start(self, task: dict[str, Any]) -> str:
        self.table, self.name = dict(task["table"]), str(task["name"])
        self.looked_up = self.answered = self.correct = False
        return f"Question: What is the code of {self.name}?"

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        match = _LOOKUP_ACTION.match(action)
        if match is None:
            return f"Invalid action {action[:80]!r}: use {self.action_format}.", 0.0, False, False
        verb, arg = match.group(1).lower(), match.group(2).strip().lower()
        if verb == "lookup":
            self.looked_up = self.looked_up or arg == self.name
            return self.table.get(arg, f"no code for {arg!r}"), 0.0, False, True
        self.answered, self.correct = True, arg == self.table[self.name]
        verdict = "correct" if self.correct else "wrong"
        return f"Answer {arg} is {verdict}.", float(self.correct), True, True

    def _anchor(self) -> tuple:
        return (self._task_id(self.task), self.looked_up, self.answered)

    def _won(self) -> bool:
        return self.correct

    def oracle_action(self) -> str:
        """Look the asked name up, then answer its code."""
        return f"answer[{self.table[self.name]}]" if self.looked_up else f"lookup[{self.name}]"


def make_lookup(table: dict[str, str]) -> Any:
    """The agent's `lookup` tool over one task's table (a closure: one tool per episode)."""

    @function_tool
    def lookup(name: str) -> str:
        """The code of a name."""
        key = name.strip().lower()
        return table.get(key, f"no code for {key!r}")

    return lookup


async def run_lookup(task: dict, base_url: str, api_key: str) -> str:
    """The lookup agent: the task's table reaches the tool, never the model's prompt."""
    tool = make_lookup(task["data"]["table"])
    return await _run_agent(task, base_url, api_key,
                            "Look the name up, then reply with its code only.", tool)  # fmt: skip


_LOOKUP_QUESTION = re.compile(r"What is the code of (\w+)\?")


def respond_lookup(prompt: str) -> str:
    """The demonstrator: `lookup` of the question's name; after the tool's response, it."""
    # " blue", space first: env-bpe then writes it as the question's own token
    return _demonstrate(prompt, _LOOKUP_QUESTION, "lookup", "name", "no lookup question")


# --- easycalc: copy an expression into the call, the number into the answer ----------

EASYCALC_ID = "bench/EasyCalc-v0"


class EasyCalcEnv(ToolQAEnv):
    """ToolQA with one-step questions: `What is A + B?`, A and B in 10..49 (every question,
    expression and sum has the same length: what a tiny model can copy by position)."""

    env_id = EASYCALC_ID
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


async def run_calc(task: dict, base_url: str, api_key: str) -> str:
    """docs/agents.md's calculator agent, its tool's output as a plain number."""
    return await _run_agent(task, base_url, api_key,
                            "Use the calculator, then reply with the number only.", calculator)  # fmt: skip


_CALC_QUESTION = re.compile(r"What is (\d+ [-+*] \d+)\?")


def respond_calc(prompt: str) -> str:
    """The demonstrator: a calculator call with the question's expression; after the tool's
    response, that response."""
    # " 27 + 45", space first: env-bpe then splits it into the question's own tokens
    return _demonstrate(prompt, _CALC_QUESTION, "calculator", "expression", "no question")


class GatewayTask(NamedTuple):
    """One of the bench's tasks: the env, the agent program, its demonstrator."""

    env_id: str
    env: str
    """The env's entry point ("module:Class"), registered by the bench."""
    fn: str
    """The agent program (`agent_program.fn`)."""
    respond: Callable[[str], str]
    """The demonstrator of the SFT start."""
    max_new_tokens: int
    """Tokens per model call: a tool call and a little room."""


TASKS = {
    "lookup": GatewayTask(LOOKUP_ID, "gateway_agent:LookupEnv", "gateway_agent:run_lookup",
                          respond_lookup, 64),  # a lookup call is ~40 env-bpe tokens
    "easycalc": GatewayTask(EASYCALC_ID, "gateway_agent:EasyCalcEnv", "gateway_agent:run_calc",
                            respond_calc, 80),  # a calculator call is ~60
}  # fmt: skip
"""The bench's tasks by `--task` name."""
