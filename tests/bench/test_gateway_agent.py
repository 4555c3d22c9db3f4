"""`bench/gateway_agent.py`'s lookup task: the env grades, the demonstrator writes the right
call and answer, and the Agents SDK agent reads the task's hidden table through its tool."""

import asyncio

import pytest

from arborl.envs.check import check_env
from arborl.generation.gateway import Gateway
from arborl.models.env_bpe import build_env_bpe_tokenizer

from ._scripts import load_script

ga = load_script("gateway_agent")
ScriptedBackend = load_script("agent_sft").ScriptedBackend


def test_lookup_env_conforms_and_grades_the_asked_names_code():
    check_env(ga.LookupEnv())
    env = ga.LookupEnv(split="test")
    task = {"table": {"red": "box", "blue": "book", "green": "lamp", "yellow": "soap"},
            "name": "blue"}  # fmt: skip
    obs, _ = env.reset(options={"task": task})
    assert obs == "Question: What is the code of blue?"
    assert env.step("lookup[ green]")[0] == "lamp"  # any name reads the table
    assert env.step("lookup[purple]")[0] == "no code for 'purple'"
    obs, reward, terminated, _, info = env.step("answer[lamp]")  # green's code, not blue's
    assert (reward, terminated, info["won"]) == (0.0, True, False)
    env.reset(options={"task": task})
    obs, reward, terminated, _, info = env.step("answer[ Book ]")
    assert (reward, terminated, info["won"]) == (1.0, True, True)


def test_lookup_tasks_are_single_tokens_and_every_table_is_a_one_to_one_map():
    tok = build_env_bpe_tokenizer()
    for word in (*ga.NAMES, *ga.CODES):  # the name is copied as " blue", the code as "book"
        assert len(tok.tokenize(word)) == len(tok.tokenize(" " + word)) == 1, word
    env = ga.LookupEnv()
    for seed in range(20):
        env.reset(seed=seed)
        table = env.task["table"]
        assert sorted(table) == sorted(ga.NAMES) and len(set(table.values())) == len(ga.NAMES)
        assert set(table.values()) <= set(ga.CODES) and env.task["name"] in ga.NAMES


def test_the_demonstrator_calls_lookup_then_answers_the_tools_word():
    first = "<|user|>Question: What is the code of green?<|end|><|assistant|>"
    call = ga.respond_lookup(first)
    assert call == '<tool_call>{"name": "lookup", "arguments": {"name": " green"}}</tool_call>'
    second = f"{first}{call}<|end|><|user|><tool_response>\nlamp\n</tool_response><|end|>"
    assert ga.respond_lookup(second) == "lamp"
    with pytest.raises(ValueError, match="no lookup question"):
        ga.respond_lookup("<|user|>Hello<|end|>")


def test_the_agent_reads_the_hidden_table_through_its_tool_and_the_env_grades_it():
    tok = build_env_bpe_tokenizer()
    env = ga.LookupEnv(split="test")
    obs, _ = env.reset(seed=7)
    code = env.task["table"][env.task["name"]]
    with Gateway(ScriptedBackend(tok, ga.respond_lookup), tok) as gw:
        s = gw.open_session()
        answer = asyncio.run(ga.run_lookup({"observation": obs, "data": env.task},
                                           s.base_url, s.key))  # fmt: skip
        calls = gw.close_session(s.id)
    assert len(calls) == 2 and calls[0].choices[0].tool_calls
    # the tool's result reached the second prompt; the table itself never did
    second = tok.decode(calls[1].prompt_ids[0], skip_special_tokens=False)
    assert f"<tool_response>\n{code}\n</tool_response>" in second
    others = [c for n, c in env.task["table"].items() if n != env.task["name"]]
    assert not set(tok.convert_tokens_to_ids(others)) & set(calls[1].prompt_ids[0])
    assert answer == f"answer[{code}]"
    assert env.step(answer)[1] == 1.0
