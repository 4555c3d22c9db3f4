"""The char tokenizer: exact round trips, chat template, save/load."""

import string

import pytest
from transformers import AutoTokenizer

from arborl.models import build_char_tokenizer


def test_round_trip_all_printable_and_specials():
    tok = build_char_tokenizer()
    text = string.printable + "<|user|>hi<|end|><|assistant|>  a\n\tb<|end|>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    # one id per character outside the specials
    assert len(tok.encode("hello", add_special_tokens=False)) == 5
    assert tok.eos_token == "<|end|>"
    assert tok.convert_ids_to_tokens(tok.encode("<|end|>", add_special_tokens=False)) == ["<|end|>"]


def test_extra_tokens_single_and_multi_char():
    tok = build_char_tokenizer(extra_tokens=("é", "<think>"))
    ids = tok.encode("é<think>x", add_special_tokens=False)
    assert len(ids) == 3 and tok.decode(ids) == "é<think>x"
    with pytest.raises(ValueError, match="extra_tokens"):
        build_char_tokenizer(extra_tokens=("",))


def test_chat_template_and_left_padding():
    tok = build_char_tokenizer()
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == "<|user|>hi<|end|><|assistant|>yo<|end|><|assistant|>"
    no_prompt = tok.apply_chat_template(msgs[:1], tokenize=False)
    assert no_prompt == "<|user|>hi<|end|>"
    batch = tok(["ab", "abcd"], padding=True)
    assert batch["attention_mask"][0] == [0, 0, 1, 1]
    assert batch["input_ids"][0][:2] == [tok.pad_token_id] * 2


def test_save_and_autotokenizer_round_trip(tmp_path):
    tok = build_char_tokenizer(extra_tokens=("<think>",))
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "<|user|>Go north<think><|end|>"
    assert again.encode(text, add_special_tokens=False) == tok.encode(
        text, add_special_tokens=False
    )
    assert again.chat_template == tok.chat_template
    assert again.padding_side == "left"
    assert again.eos_token_id == tok.eos_token_id
