"""Real agent libraries, unmodified, drive the gateway (issue 32 req 4): the OpenAI Agents SDK
(`openai-agents`) with a function tool and smolagents' `ToolCallingAgent` each run their own
loop against a session's `base_url`; their calls land in the record and become step rows.

The "model" is a scripted backend (a random tiny model never calls a tool): it answers with
a tool call until a tool result is in its prompt, so both libraries really call their tool.
`docs/agents.md`'s example (tests/e2e/test_agents_doc.py) trains the real tiny model through
the Agents SDK. Both libraries are in the dev extra: a missing one fails here, not skips."""

from __future__ import annotations

from arborl.envs import make_pool
from arborl.models.tokenizer import build_char_tokenizer
from arborl.rollout import RolloutConfig
from arborl.rollout.agent_config import AgentProgramConfig
from arborl.rollout.agents import AgentProgram, run_agent_rollout
from tests.generation._scripted import ScriptedBackend

ADD_CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


def _rollout(fn, script):
    tok = build_char_tokenizer()
    backend = ScriptedBackend(tok, script, max_length=1 << 16)  # smolagents' prompt: 4k chars
    pool = make_pool("arborl/ToolQA-v0", 2, "inproc")
    cfg = RolloutConfig(num_tasks=1, group_size=2, max_new_tokens=128, seed=0)
    try:
        res = run_agent_rollout(backend, tok, pool, [5], cfg, AgentProgramConfig(timeout_s=60),
                                program=AgentProgram(fn=fn))  # fmt: skip
    finally:
        pool.close()
    return res, tok


def test_openai_agents_sdk_with_a_function_tool():
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no trace export to api.openai.com
    added = []

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        added.append((a, b))
        return a + b

    async def sdk_agent(task, base_url, api_key):
        client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        model = OpenAIChatCompletionsModel(model="policy", openai_client=client)
        agent = Agent(name="calc", instructions="Use add.", tools=[add], model=model)
        result = await Runner.run(agent, "add 2 and 3")
        return float(result.final_output == "the sum is 5")

    res, tok = _rollout(
        sdk_agent, lambda p, _i: "the sum is 5" if "<tool_response>" in p else ADD_CALL
    )
    assert added == [(2, 3), (2, 3)]  # each episode's run called the tool
    assert [ep.total_return for ep in res.episodes] == [1.0, 1.0]
    assert len(res.batch) == 4 and res.stats["env_errors"] == 0  # 2 calls per episode
    first, second = res.episodes[0].turns
    assert tok.decode(first.response_ids, skip_special_tokens=True) == ADD_CALL
    assert first.info["tool_calls"][0]["function"]["name"] == "add"
    assert "<tool_response>\n5\n</tool_response>" in tok.decode(second.prompt_ids)
    assert '"name": "add"' in tok.decode(first.prompt_ids)  # the SDK's tools reached the prompt


def test_smolagents_tool_calling_agent():
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first integer
            b: the second integer
        """
        return a + b

    def smol_agent(task, base_url, api_key):
        model = OpenAIServerModel(model_id="policy", api_base=base_url, api_key=api_key)
        agent = ToolCallingAgent(tools=[add], model=model, max_steps=3, verbosity_level=0)
        return float(str(agent.run("add 2 and 3")) == "5")

    final = '<tool_call>{"name": "final_answer", "arguments": {"answer": "5"}}</tool_call>'
    res, tok = _rollout(smol_agent, lambda p, _i: final if "Observation:\n5" in p else ADD_CALL)
    assert [ep.total_return for ep in res.episodes] == [1.0, 1.0]
    assert len(res.batch) == 4 and res.stats["env_errors"] == 0
    first, second = res.episodes[0].turns
    assert [t.info["tool_calls"][0]["function"]["name"] for t in (first, second)] == [
        "add",
        "final_answer",
    ]
    # smolagents re-writes the history in its own words ("Calling tools: [...]"), so the
    # second prompt is not the first call's tokens; each row is still what the policy saw
    assert "Observation:\n5" in tok.decode(second.prompt_ids)
