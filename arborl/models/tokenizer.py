"""A character-level tokenizer with chat special tokens, built offline in milliseconds.

Tiny from-config policies need a tokenizer that exists without any download. One token per
character (over `string.printable`) round-trips text exactly, keeps the vocabulary at ~110
entries (so the embedding matrix stays tiny) and makes stop-string handling trivial.
Chat turns are framed by special tokens, `<|user|>content<|end|>`, with `<|end|>` doubling
as EOS so that "end of the assistant's turn" and "stop generating" are the same token.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|bos|>"
UNK_TOKEN = "<|unk|>"
EOS_TOKEN = "<|end|>"
"""End of a chat turn and end of generation."""
CHAT_ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, UNK_TOKEN, EOS_TOKEN, *CHAT_ROLE_TOKENS)

# Renders `<|role|>content<|end|>` per message; an unknown role fails loudly instead of
# silently producing text the model was never trained on.
CHAR_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{ raise_exception('unknown chat role ' ~ message['role'] ~ "
    "'; the char tokenizer knows system, user, assistant') }}"
    "{%- endif -%}"
    "{{ '<|' ~ message['role'] ~ '|>' ~ message['content'] ~ '<|end|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}"
)


def build_char_tokenizer(extra_tokens: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """Build the character-level tokenizer (pad id 0, left padding, chat template).

    `extra_tokens` extends the vocabulary: single characters outside `string.printable`
    (e.g. a task's symbols) become ordinary one-char tokens, longer strings (e.g. `<think>`)
    become whole added tokens matched before the per-character split. Characters that are in
    neither map to `<|unk|>`, which is the only way a round trip can lose text.
    """
    vocab: dict[str, int] = {}
    for tok in (*SPECIAL_TOKENS, *string.printable):
        vocab.setdefault(tok, len(vocab))
    multi_char: list[str] = []
    for tok in extra_tokens:
        if not isinstance(tok, str) or not tok:
            raise ValueError(f"extra_tokens must be non-empty strings, got {tok!r}")
        if len(tok) == 1:
            vocab.setdefault(tok, len(vocab))
        elif tok not in multi_char and tok not in vocab:
            multi_char.append(tok)

    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # `(?s).` is rejected by Oniguruma, `[\s\S]` is the portable "any char".
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        additional_special_tokens=list(CHAT_ROLE_TOKENS),
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    if multi_char:
        tok.add_tokens(multi_char)
    tok.chat_template = CHAR_CHAT_TEMPLATE
    return tok
