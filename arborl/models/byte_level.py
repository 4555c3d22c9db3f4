"""GPT-2's byte <-> printable-character table, shared by the BPE builder and `token_bytes`.

Byte-level BPE vocabularies (GPT-2, Llama-3, Qwen, SmolLM) spell every byte as one
printable character so that token strings are valid text; this is that table.
"""

from __future__ import annotations

import functools


@functools.cache
def bytes_to_unicode() -> dict[int, str]:
    """byte -> character: printable Latin-1 bytes map to themselves, the rest to 256+."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


@functools.cache
def unicode_to_bytes() -> dict[str, int]:
    """character -> byte (inverse of `bytes_to_unicode`)."""
    return {c: b for b, c in bytes_to_unicode().items()}
