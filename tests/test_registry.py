"""The one registry helper: register/get, lazy `module:attr` entries, the decorator,
did-you-mean errors, entry-point errors and the `error=` base class."""

from __future__ import annotations

import json
import sys

import pytest

from arborl.registry import Registry, UnknownNameError, is_entry_point, load_entry_point


def test_register_get_names_contains():
    reg = Registry("thing")
    reg.register("a", 1)
    reg["b"] = 2  # mapping-style registration
    assert reg.get("a") == 1 and reg["b"] == 2
    reg.register("0", 0)
    assert reg.in_order() == ["a", "b", "0"] and reg.pop("0") == 0
    assert reg.names() == ["a", "b"] and list(reg) == ["a", "b"] and len(reg) == 2
    assert "a" in reg and "c" not in reg and set(reg) == {"a", "b"}
    assert reg.pop("a") == 1 and "a" not in reg
    assert reg.pop("a", None) is None
    del reg["b"]
    assert len(reg) == 0
    with pytest.raises(UnknownNameError):
        del reg["b"]


def test_lazy_entry_is_imported_on_first_get():
    reg = Registry("codec")
    reg.register("json-dumps", "json:dumps")
    assert reg.entry("json-dumps") == "json:dumps"  # not imported yet
    assert reg.get("json-dumps") is json.dumps
    assert reg.entry("json-dumps") is json.dumps  # cached after the first import
    reg.register("broken", "no_such_module_xyz:f")
    with pytest.raises(
        ImportError, match=r"codec='broken'.*cannot import module 'no_such_module_xyz'"
    ):
        reg.get("broken")


def test_decorator_registers_and_returns_the_function():
    reg = Registry("estimator")

    @reg.register("double")
    def double(x):
        return 2 * x

    assert double(3) == 6 and reg.get("double") is double
    with pytest.raises(ValueError, match="estimator='double' is already registered"):
        reg.register("double", double, replace=False)


def test_unknown_name_lists_known_names_with_did_you_mean():
    reg = Registry("algo.name")
    for name in ("grpo", "rloo", "gigpo"):
        reg.register(name, name)
    with pytest.raises(KeyError) as e:
        reg.get("gpro")
    # str() reads as plain text (a KeyError would print its repr)
    assert str(e.value) == (
        "algo.name='gpro' is not known; use one of: gigpo, grpo, rloo. Did you mean 'grpo'?"
    )
    with pytest.raises(
        UnknownNameError, match=r"'zzz' is not known; use one of: gigpo, grpo, rloo\.$"
    ):
        reg.get("zzz")  # nothing close: no hint


def test_entry_points_accepted_when_allowed():
    reg = Registry("scorer", allow_entry_points=True)
    assert reg.get("json:loads") is json.loads
    with pytest.raises(KeyError, match=r"or a 'module:attr' entry point"):
        reg.get("plain-name")
    assert Registry("scorer").names() == []
    with pytest.raises(KeyError):
        Registry("scorer").get("json:loads")  # not allowed there: an unknown name


def test_load_entry_point_errors_name_the_field():
    assert load_entry_point("json:JSONDecoder.decode") is json.JSONDecoder.decode
    with pytest.raises(ValueError, match=r"agent.summary_fn='json\.dumps' is not of the form"):
        load_entry_point("json.dumps", "agent.summary_fn")
    with pytest.raises(ImportError, match=r"f='no_such_module_xyz:f': cannot import module"):
        load_entry_point("no_such_module_xyz:f", "f")
    with pytest.raises(AttributeError, match=r"module 'json' has no attribute 'nope'"):
        load_entry_point("json:nope")
    assert is_entry_point("a.b:c") and not is_entry_point("a.b") and not is_entry_point("a: b")
    assert not is_entry_point("rm:") and not is_entry_point(3)


def test_error_base_class_and_custom_message():
    reg = Registry(
        "quality.scorer",
        error=ValueError,
        message="{what}={name} is not known; use one of {known}.{hint}",
    )
    reg.register("return", len)
    with pytest.raises(ValueError, match="Did you mean 'return'") as e:
        reg.get("retrun")
    assert isinstance(e.value, KeyError)  # still an UnknownNameError
    assert isinstance(e.value, UnknownNameError)
    assert str(e.value).startswith("quality.scorer='retrun' is not known; use one of return.")


def test_entry_point_group_names_are_found_lazily(tmp_path, monkeypatch):
    """A registry with `entry_point_group` lists an installed plug-in's names and imports
    one only when it is asked for (a dist-info folder on the path, as pip writes it)."""
    from arborl.registry import Registry

    (tmp_path / "ep_plugin_mod.py").write_text("LOADED = True\nTHING = 'thing'\n")
    info = tmp_path / "ep_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[arborl.test_things]\nthing = ep_plugin_mod:THING\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("test.thing", entry_point_group="arborl.test_things")
    reg.register("builtin", "x")
    assert reg.names() == ["builtin", "thing"] and "thing" in reg and reg.accepts("thing")
    assert "ep_plugin_mod" not in sys.modules  # listed, not imported
    assert reg.get("thing") == "thing" and "ep_plugin_mod" in sys.modules
    assert not reg.accepts("other:thing")  # module:attr only with allow_entry_points
    assert Registry("t", allow_entry_points=True).accepts("other:thing")
    sys.modules.pop("ep_plugin_mod", None)
