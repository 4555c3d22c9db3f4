"""Each filter drops exactly the rows it should, and names its reason."""

import pytest

from arborl.curate import FilterConfig, Record
from arborl.curate.filters import bad_char, make_row_check, make_token_counter
from arborl.data import Step, Trajectory


def apply_filters(records, cfg):
    """(kept, [(record, filter name, reason)]) after every check, as the pipeline applies them."""
    check = make_row_check(cfg)
    kept, dropped = [], []
    for r in records:
        failed = check(r)
        (kept if failed is None else dropped).append(r if failed is None else (r, *failed))
    return kept, dropped


def _rec(tid, steps, won=True, instruction="do it"):
    t = Trajectory(tid, "env", instruction=instruction, steps=steps, won=won)
    return Record(traj=t, file="f.jsonl", row=int(tid[1:]), domain="d")


def _steps(*pairs, rewards=None, valid=None):
    out = []
    for i, (obs, act) in enumerate(pairs):
        info = {} if valid is None else {"valid_action": valid[i]}
        out.append(Step(obs, act, reward=(rewards or [0.0] * len(pairs))[i], info=info))
    return out


RECORDS = [
    _rec("r1", _steps(("o", "up"), ("o", "down"), rewards=[0.0, 1.0])),  # return 1, 2 turns
    _rec("r2", _steps(("o", "up")), won=False),  # lost
    _rec("r3", _steps(("o", "up"), ("o", "up"), ("o", "up"))),  # 3 turns, return 0
    _rec("r4", _steps(("o", "fly"), valid=[False])),  # rejected action, bad regex
    _rec("r5", _steps(("o caf\u00e9", "up"))),  # non-ascii
    _rec("r6", _steps(("o \x1b[31m", "up"))),  # control char
    _rec("r7", _steps(("word " * 30, "up"))),  # 31 + 1 + 2 instruction words
]


def _kept(**kw):
    kept, dropped = apply_filters(RECORDS, FilterConfig(**kw))
    return [r.traj.task_id for r in kept], {r.traj.task_id: (n, why) for r, n, why in dropped}


def test_defaults_drop_only_control_characters():
    kept, dropped = _kept()
    assert kept == ["r1", "r2", "r3", "r4", "r5", "r7"]
    assert dropped["r6"][0] == "charset" and "U+001B" in dropped["r6"][1]


def test_won_only_and_min_return():
    kept, dropped = _kept(won_only=True, charset="any")
    assert "r2" not in kept and dropped["r2"][0] == "won_only"
    kept, dropped = _kept(min_return=0.5, charset="any")
    assert kept == ["r1"]  # the only return >= 0.5
    assert dropped["r3"][1] == "return 0 < filters.min_return=0.5"


def test_turn_and_token_limits():
    kept, dropped = _kept(min_turns=2, max_turns=2, charset="any")
    assert kept == ["r1"]
    assert dropped["r3"][1] == "3 turns > filters.max_turns=2"
    assert dropped["r2"][1] == "1 turns < filters.min_turns=2"
    # r7: instruction 2 words + observation 30 words + action 1 word = 33 whitespace tokens
    kept, dropped = _kept(max_tokens=32, charset="any")
    assert list(dropped) == ["r7"] and dropped["r7"][1].startswith("33 tokens > ")
    kept, dropped = _kept(max_tokens=33, charset="any")
    assert "r7" in kept


def test_action_format_regex_and_valid_actions():
    kept, dropped = _kept(action_regex="(up|down)", charset="any")
    assert list(dropped) == ["r4"] and "does not match filters.action_regex" in dropped["r4"][1]
    kept, dropped = _kept(valid_actions_only=True, charset="any")
    assert list(dropped) == ["r4"] and "rejected" in dropped["r4"][1]
    kept, dropped = _kept(action_format="react", charset="any")
    assert kept == []  # plain actions never parse as <action>...</action>
    ok = _rec("r9", [Step("o", "up", response="<think>hm</think><action>up</action>")])
    kept, _ = apply_filters([ok], FilterConfig(action_format="react"))
    assert kept == [ok]


def test_ascii_charset_and_bad_char():
    kept, dropped = _kept(charset="ascii")
    assert set(dropped) == {"r5", "r6"}
    assert bad_char("fine\ttext\n", "printable") is None
    assert bad_char("broken \ufffd", "printable") == "\ufffd"


def test_token_counters():
    assert make_token_counter("whitespace")("a b  c") == 3
    assert make_token_counter("chars")("abc") == 3
    assert make_token_counter("tiny-0.1m")("abc") == 3  # the char tokenizer: one per char
    with pytest.raises(ValueError, match="filters.tokenizer='nope'"):
        make_token_counter("nope")
