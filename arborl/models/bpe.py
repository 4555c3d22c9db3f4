"""A real byte-level BPE tokenizer (GPT-2's vocabulary) with a ChatML template, offline.

arborl's char tokenizer round-trips any text, which hides every re-tokenization bug: with
BPE a sampled sequence is often not the canonical encoding of its own text. This builder
gives tests and small runs the real thing without a model download. GPT-2's 50,256 ranks
ship inside the `openai-whisper` package (`whisper/assets/gpt2.tiktoken`, base64 token and
rank per line); `locate_gpt2_ranks` finds an installed copy, a cached one, or fetches the
803 KB sdist once with pip (no install, nothing else from it is used).

tiktoken files hold ranks, not merges; a token's merge is recovered by running BPE over its
bytes with only lower-ranked merges allowed, which leaves exactly two parts. Specials:
`<|endoftext|>`=50256 (pad), `<|im_start|>`=50257, `<|im_end|>`=50258 (eos: the end of an
assistant turn is the end of generation).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from arborl.models.byte_level import bytes_to_unicode
from arborl.models.cache import cache_dir

WHISPER_SDIST = "openai-whisper==20250625"
ASSET = "whisper/assets/gpt2.tiktoken"
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' ~ message['role'] ~ '\\n' ~ message['content'] ~ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def locate_gpt2_ranks() -> Path:
    """Path of `gpt2.tiktoken`: installed whisper, the arborl cache, or a one-time fetch."""
    try:
        import whisper  # type: ignore[import-not-found]

        installed = Path(whisper.__file__).parent / "assets" / "gpt2.tiktoken"
        if installed.is_file():
            return installed
    except ImportError:
        pass
    cached = cache_dir() / "gpt2.tiktoken"
    if cached.is_file():
        return cached
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        done = subprocess.run([*cmd, WHISPER_SDIST, "-d", tmp], capture_output=True, text=True)
        sdists = list(Path(tmp).glob("openai_whisper-*.tar.gz"))
        if done.returncode != 0 or not sdists:
            raise RuntimeError(
                f"could not fetch {WHISPER_SDIST} for GPT-2's BPE ranks (pip said: "
                f"{done.stderr.strip()[-300:]}); put gpt2.tiktoken at {cached} or "
                "`pip install openai-whisper`"
            )
        with tarfile.open(sdists[0]) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith(ASSET))
            data = tar.extractfile(member).read()
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(data)
    return cached


def read_ranks(path: Path) -> dict[bytes, int]:
    ranks = {}
    for line in path.read_text().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _split_in_two(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """BPE over `token`'s bytes with merges ranked below it: the last merge's two parts."""
    limit = ranks[token]
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best, at = limit, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best:
                best, at = r, i
        if at < 0:
            raise ValueError(f"token {token!r} has no merge path in the ranks file")
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts[0], parts[1]


@functools.cache
def _core_json(path: str) -> str:
    """The core tokenizer's JSON, built once (~30 s on a busy 2-core CPU) and cached on disk."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    cached = cache_dir() / f"gpt2-bpe-{digest}.json"
    if cached.is_file():
        return cached.read_text()
    built = _build_core_json(path)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(built)
    tmp.replace(cached)  # atomic: parallel test workers never read half a file
    return built


def _build_core_json(path: str) -> str:
    ranks = read_ranks(Path(path))
    spell = bytes_to_unicode()
    text = {tok: "".join(spell[b] for b in tok) for tok in ranks}
    vocab = {text[tok]: r for tok, r in ranks.items()}
    merges = []
    for tok, _ in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) > 1:
            a, b = _split_in_two(tok, ranks)
            merges.append((text[a], text[b]))
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    return core.to_str()


def build_gpt2_bpe_tokenizer(
    ranks_path: str | Path | None = None, extra_tokens: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """GPT-2's byte-level BPE + ChatML specials and template (eos `<|im_end|>`), left pad.

    `extra_tokens` (e.g. `<think>`) become whole added tokens after the 50,259 ids; a
    `bpe-tiny-*` preset (`arborl.models.loading.MODEL_PRESETS`) is built around this."""
    for extra in extra_tokens:
        if not isinstance(extra, str) or not extra:
            raise ValueError(f"extra_tokens must be non-empty strings, got {extra!r}")
    path = str(ranks_path or locate_gpt2_ranks())
    core = Tokenizer.from_str(_core_json(path))
    core.add_special_tokens(list(SPECIALS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        padding_side="left",
    )
    tok.chat_template = CHATML_TEMPLATE
    new = [t for t in dict.fromkeys(extra_tokens) if t not in tok.get_vocab()]
    if new:
        tok.add_tokens(new)
    return tok


def build_bpe_policy(seed: int = 0):
    """(model, tokenizer) of the `bpe-tiny-0.1m` preset: a random-init Llama over GPT-2's
    BPE + ChatML (3.3M parameters, almost all of them the tied 50,259-row embedding)."""
    from arborl.models.loading import load_policy

    model, tok = load_policy("bpe-tiny-0.1m", seed=seed)
    return model.eval(), tok
