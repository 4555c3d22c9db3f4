"""Where arborl keeps what it fetches or builds once: `$ARBORL_CACHE`, else ~/.cache/arborl.

A leaf of `arborl.models` (standard library only): the BPE ranks and tokenizer JSON
(`bpe.py`) and converted pretrained checkpoints (`pretrained.py`) both live under it, and
neither of those modules may import the other for it (`bpe` reaches `pretrained` through
`loading`).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The arborl cache directory (not created here)."""
    return Path(os.environ.get("ARBORL_CACHE", Path.home() / ".cache" / "arborl"))
