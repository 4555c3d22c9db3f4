"""The raw bytes of one token, for the OpenAI logprobs `bytes` field.

Decoding a token alone is wrong for tokens that hold part of a UTF-8 character (GPT-2
spells `🌲` as three tokens; each decodes to U+FFFD). The vocabulary knows the real
bytes: byte-level BPE (GPT-2, Llama-3, Qwen, SmolLM) maps each byte to one printable
character, and SentencePiece byte fallback spells a byte `<0xHH>`. Any other tokenizer
(arborl's char tokenizer) holds whole characters, where decoding alone is exact.
"""

from __future__ import annotations

import re

from transformers import PreTrainedTokenizerBase

from arborl.models.byte_level import unicode_to_bytes

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def is_byte_level(tokenizer: PreTrainedTokenizerBase) -> bool:
    """True when the tokenizer's decoder is the byte-level one (GPT-2 style)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    return decoder is not None and "ByteLevel" in repr(decoder)


def token_bytes(tokenizer: PreTrainedTokenizerBase, token_id: int) -> bytes:
    """The bytes token `token_id` stands for (special tokens: their text, UTF-8)."""
    if token_id in tokenizer.all_special_ids or token_id in tokenizer.added_tokens_decoder:
        return tokenizer.decode([token_id], skip_special_tokens=False).encode()
    piece = tokenizer.convert_ids_to_tokens(token_id)
    fallback = _BYTE_FALLBACK.fullmatch(piece or "")
    if fallback:
        return bytes([int(fallback.group(1), 16)])
    table = unicode_to_bytes()
    if is_byte_level(tokenizer) and piece and all(ch in table for ch in piece):
        return bytes(table[ch] for ch in piece)
    return tokenizer.decode([token_id], skip_special_tokens=False).encode()
