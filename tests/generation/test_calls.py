"""The gateway's call record is a typed, frozen dataclass (issue 46 #3), written and read
by one pair of functions; a record file the gateway wrote before the type existed loads."""

from __future__ import annotations

import dataclasses
import json

import pytest

from arborl.generation.calls import CallChoice, CallRecord, append_call, read_calls

OLD_LINES = [  # `arborl serve --record` lines as the gateway wrote them at ffcfeb4 (dicts)
    {"session": "ep-1", "call": 0, "weight_version": 4, "started": 1.0, "ended": 1.5,
     "kind": "chat", "request": {"messages": [{"role": "user", "content": "hi"}],
                                 "tools": None, "tool_choice": None},
     "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 4, "stop": [],
                  "seed": None, "row_seeds": [5, 6]},
     "prompt_ids": [[3, 58, 72]], "n": 2,
     "choices": [{"response_ids": [7, 2], "logprobs": [-0.5, -0.1], "finish_reason": "stop",
                  "text": "ab", "content": "ab", "tool_calls": [], "tool_call_error": None},
                 {"response_ids": [9], "logprobs": [-2.0], "finish_reason": "length",
                  "text": "c", "content": "c", "tool_calls": [], "tool_call_error": None}],
     "meta": {"task": "t1"}},
    {"session": "ep-1", "call": 1, "weight_version": 4, "started": 2.0, "ended": 2.5,
     "kind": "completion", "request": {"prompt": ["ab", "cd"]}, "sampling": {},
     "prompt_ids": [[1], [2, 3]],  # no "n" (one choice per prompt), no meta, no chat fields
     "choices": [{"response_ids": [4], "logprobs": [-1.0], "finish_reason": "stop", "text": "x"},
                 {"response_ids": [5], "logprobs": [-3.0], "finish_reason": "stop", "text": "y"}]},
]  # fmt: skip


def test_old_record_files_load_as_typed_records(tmp_path):
    path = tmp_path / "ep-1.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in OLD_LINES) + "\n")
    chat, completion = read_calls(path)
    assert isinstance(chat, CallRecord) and isinstance(chat.choices[1], CallChoice)
    assert (chat.call, chat.weight_version, chat.meta) == (0, 4, {"task": "t1"})
    # choice j answers prompt j // n
    rows = [(p, c.response_ids) for p, c in chat.rows()]
    assert rows == [([3, 58, 72], [7, 2]), ([3, 58, 72], [9])]
    assert completion.n == 1 and completion.meta == {}
    assert [(p, c.text) for p, c in completion.rows()] == [([1], "x"), ([2, 3], "y")]
    assert completion.choices[0].tool_call_error is None and completion.choices[0].content is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        chat.call = 3  # type: ignore[misc]


def test_append_and_read_are_one_pair(tmp_path):
    (record,) = read_calls(_write(tmp_path / "a.jsonl", OLD_LINES[:1]))
    path = tmp_path / "sub" / "b.jsonl"
    append_call(path, record)
    append_call(path, dataclasses.replace(record, call=1))
    assert read_calls(path) == [record, dataclasses.replace(record, call=1)]
    assert json.loads(path.read_text().splitlines()[0]) == OLD_LINES[0]  # the same JSON


def test_a_line_that_is_no_record_names_itself(tmp_path):
    path = _write(tmp_path / "bad.jsonl", [OLD_LINES[0], {"session": "x", "call": 0}])
    with pytest.raises(ValueError, match=r"bad.jsonl:2 lacks \['weight_version'"):
        read_calls(path)


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path
