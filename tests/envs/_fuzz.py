"""Random action strings for env fuzz tests: an env's own near-miss specials first, then
random strings over an alphabet that mixes its syntax with control and non-ASCII chars."""

from __future__ import annotations

import random

NOISE = "\n\t\x00éßж漢字🙂\u200b"


def fuzz_actions(alphabet: str, specials: list[str], num: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    chars = alphabet + NOISE
    out = list(specials)
    while len(out) < num:
        out.append("".join(rng.choice(chars) for _ in range(rng.randint(1, 30))))
    return out
