"""Prompts with the real char tokenizer: memory strategies, instruction placement and the
growing (episode-view) context built without re-tokenizing earlier text."""

import pytest

from arborl.agent import (
    AgentConfig,
    ChatContinuation,
    build_messages,
    build_prompt,
    make_memory,
    render_chat,
)
from arborl.models import build_char_tokenizer

TOK = build_char_tokenizer()
INSTR = "Reach G."


def _memory(cfg, turns):
    mem = make_memory(cfg)
    for obs, resp in turns:
        mem.add(obs, resp)
    return mem


TURNS = [("o1", "up"), ("o2", "left"), ("o3", "down")]


def test_full_memory_renders_alternating_messages_with_instruction_first():
    cfg = AgentConfig()
    msgs = build_messages("o4", _memory(cfg, TURNS).view(), INSTR, cfg)
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 3 + ["user"]
    assert msgs[0]["content"] == "Reach G.\n\no1" and msgs[-1]["content"] == "o4"
    assert [m["content"] for m in msgs[1::2]] == ["up", "left", "down"]


def test_last_k_and_summary_memory():
    cfg = AgentConfig(memory="last_k", memory_k=2)
    msgs = build_messages("o4", _memory(cfg, TURNS).view(), INSTR, cfg)
    assert [m["content"] for m in msgs] == ["Reach G.\n\no2", "left", "o3", "down", "o4"]

    cfg = AgentConfig(memory="summary")
    msgs = build_messages("o4", _memory(cfg, TURNS).view(), INSTR, cfg)
    assert len(msgs) == 1
    assert msgs[0]["content"] == (
        "Reach G.\n\nturns so far: 3; last observation: o3; last action: down\n\no4"
    )

    def hook(prev, obs, resp, turn):
        return prev + resp[0]

    cfg = AgentConfig(memory="summary", summary_fn=hook, include_instruction=False)
    assert build_messages("o4", _memory(cfg, TURNS).view(), INSTR, cfg)[0]["content"] == "uld\n\no4"


def test_instruction_options():
    cfg = AgentConfig(instruction_role="system", max_obs_chars=1)
    msgs = build_messages("o4", _memory(cfg, TURNS[:1]).view(), INSTR, cfg)
    assert msgs[0] == {"role": "system", "content": INSTR}
    assert msgs[1]["content"] == "o" and msgs[-1]["content"] == "o"
    cfg = AgentConfig(repeat_instruction=True, system_prompt="S")
    from arborl.agent import instruction_text

    msgs = build_messages("o4", _memory(cfg, TURNS[:1]).view(), instruction_text(INSTR, cfg), cfg)
    assert msgs[0]["content"] == "S\n\no1" and msgs[-1]["content"] == "S\n\no4"


def test_build_prompt_ends_with_generation_prompt():
    cfg = AgentConfig(include_instruction=False)
    ids = build_prompt(TOK, "ab", make_memory(cfg), INSTR, cfg)
    assert TOK.decode(ids) == "<|user|>ab<|end|><|assistant|>"
    assert ids[-1] == TOK.convert_tokens_to_ids("<|assistant|>")


@pytest.mark.parametrize("ends_with_eos", [True, False])
def test_growing_context_equals_rebuilt_prompt(ends_with_eos):
    """With a char tokenizer the episode-view context equals the full-memory rebuilt prompt,
    and the generated ids are kept as they were (an inserted `<|end|>` closes a cut turn)."""
    cfg = AgentConfig()
    cont = ChatContinuation(TOK)
    mem = make_memory(cfg)
    ctx = build_prompt(TOK, "o1", mem, INSTR, cfg)
    for obs_prev, obs_next in [("o1", "o2"), ("o2", "o3")]:
        gen = TOK("up", add_special_tokens=False)["input_ids"]
        if ends_with_eos:
            gen = gen + [TOK.eos_token_id]
        ctx = ctx + gen + cont.ids_after_turn(gen, obs_next)
        mem.add(obs_prev, "up")
        assert ctx == build_prompt(TOK, obs_next, mem, INSTR, cfg)
    assert TOK.decode(ctx).count("<|end|>") == 5


def test_render_requires_a_chat_template():
    from transformers import PreTrainedTokenizerFast

    bare = PreTrainedTokenizerFast(tokenizer_object=TOK.backend_tokenizer)
    with pytest.raises(ValueError, match="chat_template"):
        render_chat(bare, [{"role": "user", "content": "x"}], True)
