"""Shared fixtures of the curation tests: the fixture folder and a source helper."""

import unicodedata
from pathlib import Path

import pytest

from arborl.curate import SourceConfig

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def source(name: str, **kw) -> SourceConfig:
    return SourceConfig(path=str(FIXTURES / name), **kw)


def _fullwidth(s: str) -> str:
    return "".join(
        chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else "\u3000" if c == " " else c for c in s
    )


UNICODE_FORMS = {
    "plain": lambda s: s,
    "nfd": lambda s: unicodedata.normalize("NFD", s),
    "fullwidth": _fullwidth,  # CJK input methods: ASCII as U+FF01..FF5E, space as U+3000
    "zero_width": "\u200b".join,  # a zero-width space between every two characters
    "soft_hyphen_bom": lambda s: "\ufeff" + s.replace("e", "e\u00ad"),  # PDF copy and paste
    "nbsp_ligature_upper": lambda s: s.upper().replace(" ", "\u00a0").replace("FI", "\ufb01"),
}
"""Ways the same text arrives in scraped and model-written data that a reader does not see
(or sees as the same words); dedup and the leak check must treat them all as one text."""
