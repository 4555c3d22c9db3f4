"""Where arborl keeps what it fetches or builds once: `$ARBORL_CACHE`, else
`$XDG_CACHE_HOME/arborl`, else `~/.cache/arborl`.

A leaf of `arborl.models` (standard library only): the BPE ranks and tokenizer JSON
(`bpe.py`) and converted pretrained checkpoints (`pretrained.py`) both live under it, and
neither of those modules may import the other for it (`bpe` reaches `pretrained` through
`loading`). Layout: `gpt2.tiktoken` and `gpt2-bpe-*.json` (the BPE tokenizer),
`downloads/` (fetched wheels), `models/NAME/` (converted float checkpoints).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The arborl cache directory (not created here): `$ARBORL_CACHE`, else
    `$XDG_CACHE_HOME/arborl`, else `~/.cache/arborl` (an empty variable counts as unset)."""
    if os.environ.get("ARBORL_CACHE"):
        return Path(os.environ["ARBORL_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "arborl"
    return Path.home() / ".cache" / "arborl"
