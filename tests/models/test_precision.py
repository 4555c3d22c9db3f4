"""`model.dtype=auto`: bf16 only with a bf16 unit, a wide enough model and a measured win."""

import json

import pytest

from arborl.models import precision
from arborl.models.precision import choose_dtype, cpu_bf16_flags, explain, model_shape


def _never(*_):
    raise AssertionError("nothing should be timed here")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16 avx512_bf16\n")
    assert cpu_bf16_flags(info) == ["amx_bf16", "avx512_bf16"]
    info.write_text("processor\t: 0\nflags\t\t: fpu avx avx2\n")
    assert cpu_bf16_flags(info) == []
    assert cpu_bf16_flags(tmp_path / "missing") == []


def test_no_bf16_unit_means_float32_without_timing_anything():
    c = choose_dtype("smollm2-135m-instruct", flags=[], measure=_never)
    assert c.dtype == "float32" and "amx_bf16 or avx512_bf16" in c.reason


def test_the_tiny_presets_stay_float32_even_with_amx():
    for name in ("tiny-0.1m", "tiny-1m", "envbpe-tiny-0.1m"):
        c = choose_dtype(name, flags=["amx_bf16"], measure=_never)
        assert c.dtype == "float32" and "< 512" in c.reason, (name, c)


@pytest.mark.parametrize("bf16_rate,want", [(400.0, "bfloat16"), (120.0, "float32")])
def test_a_wide_model_takes_bf16_only_when_measured_to_pay(bf16_rate, want):
    seen = []

    def measure(hidden, ffn, dtype):
        seen.append((hidden, ffn, dtype))
        return {"float32": 100.0, "bfloat16": bf16_rate}[dtype]

    c = choose_dtype("smollm2-135m-instruct", flags=["amx_bf16"], measure=measure)
    # SmolLM2's own shapes were timed, in both dtypes; 4x pays, 1.2x is under the 1.5x bar
    assert seen == [(576, 1536, "float32"), (576, 1536, "bfloat16")]
    assert c.dtype == want and "100 GFLOP/s in float32" in c.reason


def test_model_shape_of_presets_dirs_and_unknowns(tmp_path):
    assert model_shape("smollm2-135m-instruct") == (576, 1536)
    (tmp_path / "config.json").write_text(
        json.dumps({"hidden_size": 2048, "intermediate_size": 8192})
    )
    assert model_shape(str(tmp_path)) == (2048, 8192)
    assert model_shape(str(tmp_path / "nowhere")) is None
    # an unknown shape is float32: nothing to measure against
    assert (
        choose_dtype(str(tmp_path / "nowhere"), flags=["amx_bf16"], measure=_never).dtype
        == "float32"
    )


def test_config_load_resolves_auto_and_keeps_a_set_value(monkeypatch):
    from arborl.train.config import load_train_config

    monkeypatch.setattr(precision, "_CHOSEN", {})
    cfg = load_train_config(["model.name_or_path=tiny-0.1m"])
    assert cfg.model.dtype == "float32"  # the default is auto; a tiny preset resolves to fp32
    assert "model.dtype=auto" in explain("float32", "tiny-0.1m")
    cfg = load_train_config(["model.name_or_path=tiny-0.1m", "model.dtype=bfloat16"])
    assert cfg.model.dtype == "bfloat16" and "set by model.dtype" in explain(
        "bfloat16", "tiny-0.1m"
    )
