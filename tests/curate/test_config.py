"""The curation config: a docstring under every field, the example YAML loads, and bad
keys or values fail naming the key path."""

import dataclasses
from pathlib import Path

import pytest

from arborl.config import ConfigError, field_docs
from arborl.curate import config as curate_config
from arborl.curate import load_curate_config

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_has_a_docstring():
    classes = [c for c in vars(curate_config).values()
               if dataclasses.is_dataclass(c) and c.__module__ == curate_config.__name__]  # fmt: skip
    assert len(classes) == 8  # Source, Filter, Quality, Dedup, Mix, Split, Export, Curate
    missing = [f"{c.__name__}.{f.name}" for c in classes for f in dataclasses.fields(c)
               if not field_docs(c).get(f.name)]  # fmt: skip
    assert missing == []


def test_example_configs_load():
    for path in sorted((ROOT / "configs" / "curate").glob("*.yaml")):
        cfg = load_curate_config(files=[path])
        assert cfg.sources and all(s.path for s in cfg.sources), path


def test_bad_values_name_the_key():
    with pytest.raises(
        ConfigError, match=r"sources\[0\]\.format='csv' is not registered; choose one of \['auto'"
    ):
        load_curate_config(["sources=[{path: a.jsonl, format: csv}]"])
    with pytest.raises(ConfigError, match=r"sources\[0\]\.path is empty"):
        load_curate_config(["sources=[{domain: web}]"])
    with pytest.raises(ConfigError, match="dedup.threshold=1.5 is above the maximum 1.0"):
        load_curate_config(["dedup.threshold=1.5"])
    with pytest.raises(ConfigError, match=r"export.kinds has unknown \['csv'\]"):
        load_curate_config(["export.kinds=[sft, csv]"])
    with pytest.raises(ConfigError, match="split.ratios.val=-1.0 must be a number >= 0"):
        load_curate_config(["split.ratios={train: 1, val: -1}"])
