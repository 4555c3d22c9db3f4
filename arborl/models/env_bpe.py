"""`env-bpe`: a small byte-level BPE trained on the real benchmark packages' text.

The char tokenizer spends one token per character, so a 320-character BabyAI view is 320
tokens and every forward, backward and attention pass pays for all of them; GPT-2's BPE
cuts that ~5x, but its 50,259-row embedding and LM head outweigh a tiny model's body
6-50x. This vocabulary is learned from what BabyAI, TextWorld-Express and ALFWorld show an
agent (instructions, observations in every view, actions: `tools/build_env_bpe.py`), so
their words are single tokens: 1,585 ids (the corpus has no pair left to merge before the
2,048 asked for), and as few tokens as GPT-2's BPE on that text (BabyAI views: 62 tokens
for 240 characters, 35 in the compact view). Byte-level: any other text still round-trips,
only longer.

Chat framing is the char tokenizer's (`<|user|>...<|end|>`, `<|end|>` is EOS, pad id 0),
so every place arborl handles that tokenizer handles this one. The trained tokenizer is
committed (`assets/env_bpe.json`, 51 KB): building it is a file read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from arborl.models.tokenizer import (
    BOS_TOKEN,
    CHAR_CHAT_TEMPLATE,
    CHAT_ROLE_TOKENS,
    EOS_TOKEN,
    PAD_TOKEN,
)

ASSET = Path(__file__).resolve().parent / "assets" / "env_bpe.json"
SPECIALS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, *CHAT_ROLE_TOKENS)
"""Ids 0-5, in this order (pad is 0, as in the char tokenizer)."""


def train_env_bpe(lines: Iterable[str], vocab_size: int = 2048) -> Tokenizer:
    """A byte-level BPE (GPT-2's pre-tokenization: words keep their leading space) with
    `SPECIALS` first, trained on `lines` up to `vocab_size` tokens."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(lines, trainer)
    return core


def build_env_bpe_tokenizer(extra_tokens: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """The committed `env-bpe` tokenizer with the char tokenizer's chat framing, left
    padding, and `extra_tokens` (e.g. `<think>`) added as whole tokens after its ids."""
    for extra in extra_tokens:
        if not isinstance(extra, str) or not extra:
            raise ValueError(f"extra_tokens must be non-empty strings, got {extra!r}")
    if not ASSET.is_file():
        raise FileNotFoundError(
            f"{ASSET} is missing (it ships with arborl); reinstall arborl, or rebuild it "
            "with `python tools/build_env_bpe.py` from a source checkout"
        )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_file(str(ASSET)),
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        additional_special_tokens=list(CHAT_ROLE_TOKENS),
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    tok.chat_template = CHAR_CHAT_TEMPLATE
    new = [t for t in dict.fromkeys(extra_tokens) if t not in tok.get_vocab()]
    if new:
        tok.add_tokens(new)
    return tok
