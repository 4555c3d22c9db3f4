"""Config files are read with bounded alias expansion, duplicate-key and encoding checks
(issue 19, review defect 12), plus a property-based fuzz of config files: any bytes give a
config or a `ConfigError`, never another exception, and never unbounded work."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborl.config import ConfigError, load_config
from arborl.config.yamlsafe import MAX_NODES, load_yaml
from arborl.train.config import TrainConfig


def alias_bomb(levels: int, width: int = 9) -> str:
    """The review's file: each level a list of `width` aliases of the level below."""
    lines = ["env:", "  kwargs:", "    l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for k in range(1, levels + 1):
        refs = ", ".join([f"*l{k - 1}"] * width)
        lines.append(f"    l{k}: &l{k} [{refs}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_at_once(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(6))  # 9**7 leaves: 31 s and 416 MB before the fix
    assert len(path.read_bytes()) < 1000
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=f"expands to \\d+ nodes .* the limit is {MAX_NODES}"):
        load_config(TrainConfig, files=[path])
    assert time.monotonic() - t0 < 2.0


def test_small_aliases_still_work():
    data = load_yaml("a: &x {p: 1, q: [1, 2]}\nb: *x\n")
    assert data == {"a": {"p": 1, "q": [1, 2]}, "b": {"p": 1, "q": [1, 2]}}
    assert load_yaml("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n")["other"] == {"x": 1, "y": 2}


def test_duplicate_keys_and_latin1_name_the_file(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("trainer:\n  total_steps: 3\n  total_steps: 5\n")  # was: silently 5
    with pytest.raises(ConfigError, match="dup.yaml: duplicate key 'total_steps' \\(line 3\\)"):
        load_config(TrainConfig, files=[dup])
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("trainer:\n  name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="latin.yaml: not UTF-8 text .*save the file as UTF-8"):
        load_config(TrainConfig, files=[latin])


_SCALARS = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True), st.booleans(),
                     st.none(), st.text(max_size=8))  # fmt: skip
_KEYS = st.sampled_from(["trainer", "env", "kwargs", "total_steps", "id", "x", "<<", "seed"])


@st.composite
def yaml_documents(draw) -> str:
    """Random YAML: nested maps/lists over config-like keys, with anchors and aliases."""
    lines, anchors = [], []
    for depth in range(draw(st.integers(1, 6))):
        key = draw(_KEYS)
        indent = "  " * min(depth, draw(st.integers(0, depth)))
        if anchors and draw(st.booleans()):
            refs = ", ".join(
                f"*{draw(st.sampled_from(anchors))}" for _ in range(draw(st.integers(1, 9)))
            )
            value = f"[{refs}]"
        else:
            value = repr(draw(_SCALARS)) if draw(st.booleans()) else f"[{draw(_SCALARS)!r}]"
        if draw(st.booleans()):
            anchors.append(f"a{depth}")
            value = f"&a{depth} {value}"
        lines.append(f"{indent}{key}: {value}")
    text = "\n".join(lines) + "\n"
    if draw(st.booleans()):  # some raw bytes too
        text += draw(st.text(max_size=20))
    return text


@settings(max_examples=150, deadline=2000, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(yaml_documents())
def test_fuzz_config_files_give_a_config_or_a_config_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "cfg.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_config(TrainConfig, files=[path])
    except ConfigError:
        pass
