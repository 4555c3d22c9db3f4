"""SFT demos for `rollout.mode=agent`, recorded through the gateway itself.

An agent written with a library (the OpenAI Agents SDK, smolagents...) decides its own
prompts: its system text, how it writes the tool list, how it puts a tool's result back.
Demos built by hand would drift from what the gateway renders, so here the agent program is
run, unmodified, against a gateway whose model is a script: `ScriptedBackend` reads each
rendered prompt and answers with the text a demonstrator would write (a tool call, then the
final answer). The gateway records each call token-exactly, and every recorded (prompt ids,
response ids) pair becomes an `SFTExample`: the SFT rows are exactly the prompts the policy
will be shown in RL, with the demonstrator's answers as targets.

A recipe, not part of the library (`arborl sft` makes its demos from an env's oracle):
`bench/gateway_learning.py` imports it, and an agent of your own can copy it or import it
with `bench/` on the path (docs/agents.md, "A start that calls tools").

    examples = record_agent_demos(program, tasks, respond, tokenizer)
    run_sft(model, tokenizer, examples, cfg.sft)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from arborl.agent import encode_text
from arborl.generation.base import Completion, SamplingParams
from arborl.generation.gateway import Gateway
from arborl.rollout.agents import AgentProgram
from arborl.train.sft import SFTExample


class ScriptedBackend:
    """A `GenerationBackend` whose "model" is `respond(prompt_text) -> response_text`: each
    prompt is decoded (special tokens kept, so the turns are visible) and answered with the
    script's text plus the end-of-turn token. Logprobs are 0 (the script is certain)."""

    def __init__(self, tokenizer: Any, respond: Callable[[str], str]) -> None:
        self.tokenizer, self.respond = tokenizer, respond

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        out = []
        for ids in prompts:
            prompt = self.tokenizer.decode(ids, skip_special_tokens=False)
            text = self.respond(prompt)
            tokens = encode_text(self.tokenizer, text)[: max(params.max_new_tokens - 1, 0)]
            tokens.append(self.tokenizer.eos_token_id)
            out.append(Completion(tokens, [0.0] * len(tokens), text, "stop"))
        return out


def record_agent_demos(
    program: Callable[..., Any],
    tasks: Sequence[dict],
    respond: Callable[[str], str],
    tokenizer: Any,
    tool_parser: str = "hermes",
    timeout_s: float = 120.0,
) -> list[SFTExample]:
    """Run `program(task, base_url, api_key)` once per task (the dicts an agent program is
    given, docs/agents.md) against a gateway serving `ScriptedBackend(tokenizer, respond)`,
    and return one `SFTExample` per recorded call: the prompt ids the chat template made of
    the agent's messages, the script's response ids ending in the end-of-turn token.
    The program runs as training runs it (`AgentProgram`: sync or async, `timeout_s` each).
    Raises if a task's program fails (`AgentFailed`) or makes no call (a demo that shows
    nothing)."""
    runner = AgentProgram(fn=program)
    backend = ScriptedBackend(tokenizer, respond)
    examples: list[SFTExample] = []
    with Gateway(backend, tokenizer, tool_parser=tool_parser) as gw:
        for i, task in enumerate(tasks):
            s = gw.open_session(meta={"demo": i})
            try:
                runner(task, s.base_url, s.key, timeout_s)
            finally:
                calls = gw.close_session(s.id)
            if not calls:
                raise ValueError(
                    f"demo {i}: the agent program made no model call; check that it uses "
                    "the base_url and api_key it is given"
                )
            for call in calls:
                for prompt, choice in call.rows():
                    examples.append(SFTExample(list(prompt), list(choice.response_ids)))
    return examples
