"""Shared fixtures of the curation tests: the fixture folder and a source helper."""

from pathlib import Path

import pytest

from arborl.curate import SourceConfig

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def source(name: str, **kw) -> SourceConfig:
    return SourceConfig(path=str(FIXTURES / name), **kw)
