"""`env-bpe`: the committed BPE of the env packages' text gives prompts of tens of tokens,
round-trips any text, frames chats as the char tokenizer does, and trains reproducibly."""

from __future__ import annotations

import pytest

from arborl.agent import AgentConfig
from arborl.agent.memory import make_memory
from arborl.agent.prompt import build_prompt
from arborl.models import load_policy, load_tokenizer
from arborl.models.env_bpe import build_env_bpe_tokenizer, train_env_bpe
from arborl.models.tokenizer import build_char_tokenizer

BABYAI = (
    "Mission: go to the blue ball\nYou see a grey box 1 step to the left; a red box 2 steps "
    "forward and 1 step to the right; a blue ball 3 steps forward and 1 step to the left.\n"
    "Walls: 4 steps forward, 2 steps to the right.\nYou are carrying nothing."
)  # 242 characters
BABYAI_COMPACT = (
    "go to the blue ball\ngrey box 1 left; red box 2 forward 1 right; blue ball 3 forward 1 "
    "left\nwalls: 4 forward, 2 right\nholding: nothing"
)
COIN = (
    "You are in the kitchen. In one part of the room you see a stove. There is also an oven. "
    "You also see a fridge that is closed. In another part of the room you see a counter, "
    "that has nothing on it. \nTo the North you see the pantry. To the East you see the "
    "corridor."
)


@pytest.fixture(scope="module")
def tok():
    return build_env_bpe_tokenizer()


def test_env_text_is_tens_of_tokens(tok):
    char = build_char_tokenizer()
    counts = {name: len(tok.encode(text)) for name, text in
              [("babyai", BABYAI), ("compact", BABYAI_COMPACT), ("coin", COIN)]}  # fmt: skip
    assert counts == {"babyai": 64, "compact": 36, "coin": 67}  # 242, 133, 264 characters
    assert len(char.encode(BABYAI)) == 242
    assert tok.convert_ids_to_tokens(tok.encode("move forward")) == ["move", "Ġforward"]
    assert len(tok) < 2048  # a small embedding and LM head


def test_any_text_round_trips_and_chats_are_framed_like_the_char_tokenizer(tok):
    for text in (BABYAI, "Zebra ✓ 🌲 naïve\t\n  x", "<think>go</think><action>up</action>"):
        assert tok.decode(tok.encode(text)) == text
    assert (tok.pad_token_id, tok.pad_token, tok.eos_token) == (0, "<|pad|>", "<|end|>")
    msgs = [{"role": "system", "content": "Play."}, {"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == build_char_tokenizer().apply_chat_template(
        msgs, tokenize=False, add_generation_prompt=True
    )
    assert text == "<|system|>Play.<|end|><|user|>hi<|end|><|assistant|>"
    ids = tok.encode(text)
    assert [tok.convert_ids_to_tokens(i) for i in (ids[0], ids[-1])] == [
        "<|system|>",
        "<|assistant|>",
    ]
    extra = build_env_bpe_tokenizer(("<think>",))
    assert len(extra) == len(tok) + 1 and extra.encode("<think>") == [len(tok)]


def test_a_babyai_prompt_of_the_envbpe_preset(tok):
    cfg = AgentConfig(memory="last_k", memory_k=0, include_instruction=False)
    ids = build_prompt(load_tokenizer("envbpe-tiny-1m"), BABYAI, make_memory(cfg), "", cfg)
    assert len(ids) == 67 and ids == build_prompt(tok, BABYAI, make_memory(cfg), "", cfg)
    model, _ = load_policy("envbpe-tiny-0.1m")
    assert model.get_input_embeddings().weight.shape == (len(tok), 64)


def test_training_is_reproducible():
    lines = [BABYAI, BABYAI_COMPACT, COIN] * 5
    a, b = train_env_bpe(lines, 400), train_env_bpe(lines, 400)
    assert a.to_str() == b.to_str() and a.get_vocab_size() <= 400
    assert a.token_to_id("<|pad|>") == 0 and a.token_to_id("<|end|>") == 2
