"""Action parsing: plain and ReAct formats, and a never-raises property over any text."""

from hypothesis import given, settings
from hypothesis import strategies as st

from arborl.agent import AgentConfig, parse_action, stop_strings
from arborl.agent.parsing import ParsedAction

REACT = AgentConfig(action_format="react")


def test_plain_is_the_stripped_text():
    p = parse_action("  up \n", AgentConfig())
    assert (p.action, p.format_ok, p.thought) == ("up", True, None)
    assert parse_action("   ", AgentConfig()).format_ok is False


def test_react_takes_first_action_block_and_thought():
    p = parse_action("<think>go to G</think><action> left </action><action>up</action>", REACT)
    assert (p.action, p.format_ok, p.thought) == ("left", True, "go to G")


def test_react_failures_keep_raw_text_or_empty():
    p = parse_action("just up", REACT)
    assert (p.action, p.format_ok) == ("just up", False)
    p = parse_action("<action>up", REACT)  # unclosed (cut by the token limit)
    assert not p.format_ok
    empty = AgentConfig(action_format="react", on_format_error="empty")
    assert parse_action("just up", empty).action == ""
    assert parse_action("<action></action>", REACT).format_ok is False


def test_react_require_thought_and_custom_tags():
    cfg = AgentConfig(action_format="react", require_thought=True, action_tag="a", think_tag="t")
    assert parse_action("<a>up</a>", cfg).format_ok is False
    assert parse_action("<t>hm</t><a>up</a>", cfg).format_ok is True
    assert parse_action("<a>up</a><t>hm</t>", cfg).format_ok is False  # thought after action


def test_stop_strings():
    assert stop_strings(REACT) == ["</action>"]
    assert stop_strings(AgentConfig()) == []


@settings(max_examples=300, deadline=None)
@given(st.text(), st.sampled_from(["plain", "react"]), st.sampled_from(["raw", "empty"]))
def test_parse_never_raises(text, fmt, on_error):
    cfg = AgentConfig(action_format=fmt, on_format_error=on_error)
    p = parse_action(text, cfg)
    assert isinstance(p.action, str) and isinstance(p.format_ok, bool)
    if not p.format_ok and on_error == "empty" and fmt == "react":
        assert p.action == ""
    if p.format_ok:
        assert p.action and p.action == p.action.strip()


def test_bad_config_names_the_field():
    import pytest

    with pytest.raises(ValueError, match=r"agent\.memory='lru'"):
        AgentConfig(memory="lru")
    with pytest.raises(ValueError, match=r"agent\.action_tag"):
        AgentConfig(action_tag="<action>")


def test_action_formats_registry_and_react_text():
    import pytest

    from arborl.agent.config import ACTION_FORMATS

    assert ACTION_FORMATS.names() == ["plain", "react", "react_text"]
    cfg = AgentConfig(action_format="react_text")
    assert parse_action("Thought: go\nAction: up", cfg) == ParsedAction("up", True)
    assert parse_action("no action line", cfg) == ParsedAction("no action line", False)
    with pytest.raises(ValueError, match=r"agent\.action_format='reakt' is not one of"):
        AgentConfig(action_format="reakt")


def test_summary_fn_entry_point_errors_name_the_field():
    import pytest

    from arborl.agent.memory import SummaryMemory

    with pytest.raises(ValueError, match=r"agent.summary_fn='no_such_mod_xyz:f': cannot import"):
        SummaryMemory(AgentConfig(memory="summary", summary_fn="no_such_mod_xyz:f"))
    mem = SummaryMemory(AgentConfig(memory="summary", summary_fn="os.path:join"))
    assert mem.fn.__name__ == "join"
