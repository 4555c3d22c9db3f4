"""Readers and writers: round trips keep the conversation exactly, lossy formats name what
they drop, and the fixture files of every format read with their malformed rows counted
at the right file, row and field (or, strict, raised)."""

import json
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborl.curate import (
    LossyExportWarning,
    MalformedRow,
    SourceConfig,
    read_sources,
    write_format,
)
from arborl.curate.formats import detect_format
from arborl.curate.records import FieldError
from arborl.data import Step, Trajectory, read_trajectories
from tests.curate.conftest import FIXTURES, source


def _react_traj() -> Trajectory:
    return Trajectory(
        task_id="t-1",
        env_id="arborl/Maze-v0",
        seed=3,
        instruction="Reach G.",
        steps=[
            Step("A..G", "right", reward=0.0, response="<think>go</think><action>right</action>"),
            Step(
                ".A.G",
                "right",
                reward=1.0,
                terminated=True,
                info={"won": True},
                response="<action>right</action>",
            ),  # fmt: skip
        ],
        won=True,
        meta={"policy": "lm", "turn_loss": [False, True], "final_observation": "..AG"},
    )


def _read(path, fmt, action_format="plain"):
    res = read_sources([SourceConfig(path=str(path), format=fmt, action_format=action_format)])
    assert not res.malformed
    return [r.traj for r in res.records]


@pytest.mark.parametrize("fmt", ["sharegpt", "openai"])
def test_chat_round_trip_keeps_text_and_names_lost_fields(fmt, tmp_path):
    t = _react_traj()
    path = tmp_path / f"out.{fmt}.jsonl"
    with pytest.warns(LossyExportWarning) as caught:
        lost = write_format(fmt, path, [t], action_format="react")
    msg = str(caught[0].message)
    for name in ("env_id", "seed", "won", "steps[].reward", "steps[].info", "meta.policy"):
        assert name in lost and name in msg
    assert "steps[].action" not in lost  # re-derived exactly from the react response
    assert ("task_id" in lost) == (fmt == "openai")  # sharegpt keeps it as `id`
    (back,) = _read(tmp_path / path.name, fmt, "react")
    assert back.instruction == t.instruction
    assert [(s.observation, s.action, s.response) for s in back.steps] == [
        (s.observation, s.action, s.response) for s in t.steps
    ]
    assert back.meta["turn_loss"] == [False, True]
    assert back.meta["final_observation"] == "..AG"
    if fmt == "sharegpt":
        assert back.task_id == "t-1"


def test_plain_actions_round_trip_without_response(tmp_path):
    t = Trajectory("t-2", "", instruction="", steps=[Step("obs 1", "up"), Step("obs 2", "left")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is lost: no warning at all
        assert write_format("sharegpt", tmp_path / "a.jsonl", [t]) == []
    (back,) = _read(tmp_path / "a.jsonl", "sharegpt")
    assert [(s.observation, s.action, s.response) for s in back.steps] == [
        ("obs 1", "up", None),
        ("obs 2", "left", None),
    ]


def test_action_that_cannot_be_rederived_is_named(tmp_path):
    t = Trajectory("t-3", "e", steps=[Step("o", "up", response="I go up")])
    with pytest.warns(LossyExportWarning, match=r"steps\[\]\.action"):
        write_format("openai", tmp_path / "a.jsonl", [t], action_format="react")


def test_verl_prompt_round_trip_and_lost_steps(tmp_path):
    prompt_only = Trajectory("task-9", "arborl/Maze-v0", seed=11, instruction="Reach G.",
                             meta={"split": "train", "final_observation": "A.G"})  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_format("verl", tmp_path / "tasks.parquet", [prompt_only])
    (back,) = _read(tmp_path / "tasks.parquet", "verl")
    assert (back.task_id, back.env_id, back.seed, back.instruction) == (
        "task-9", "arborl/Maze-v0", 11, "Reach G.")  # fmt: skip
    assert back.meta["final_observation"] == "A.G" and back.meta["split"] == "train"
    with pytest.warns(LossyExportWarning, match="steps"):
        lost = write_format("verl", tmp_path / "t2.parquet", [_react_traj()])
    assert any(k.startswith("steps") for k in lost)


def test_arborl_round_trip_is_exact(tmp_path):
    t = _react_traj()
    for suffix in ("jsonl", "parquet"):
        assert write_format("arborl", tmp_path / f"a.{suffix}", [t]) == []
        assert read_trajectories(tmp_path / f"a.{suffix}")[0] == t
        (back,) = _read(tmp_path / f"a.{suffix}", "auto")
        back.meta = {k: v for k, v in back.meta.items() if not k.startswith("source_")}
        back.meta.pop("domain")
        assert back == t


def test_detect_format_by_keys():
    assert detect_format({"conversations": []}) == "sharegpt"
    assert detect_format({"messages": []}) == "openai"
    assert detect_format({"data_source": "x", "prompt": []}) == "verl"
    assert detect_format({"task_id": "1", "env_id": "e"}) == "arborl"
    with pytest.raises(FieldError, match="matches no known format"):
        detect_format({"text": "hello"})


# The malformed rows planted in the fixtures (see fixtures/make_fixtures.py), per file:
MALFORMED = {
    "sharegpt_web_train.jsonl": [(9, "conversations[1].value"), (10, "(json)"),
                                 (11, "conversations[0].from")],
    "openai_math.jsonl": [(7, "messages"), (8, "messages[0].role")],
    "verl_maze.parquet": [(5, "data_source")],
    "verl_openmanus.parquet": [(2, "extra_info")],
    "arborl_maze.jsonl": [(5, "(row)")],
    "arborl_maze.parquet": [],
    "sharegpt_web_val.jsonl": [],
}  # fmt: skip
GOOD_ROWS = {"sharegpt_web_train.jsonl": 9, "openai_math.jsonl": 6, "verl_maze.parquet": 4,
             "verl_openmanus.parquet": 1, "arborl_maze.jsonl": 4, "arborl_maze.parquet": 2,
             "sharegpt_web_val.jsonl": 3}  # fmt: skip


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_fixture_files_read_with_malformed_rows_counted(name):
    res = read_sources([source(name, action_format="react_text")])
    assert [(m.row, m.field) for m in res.malformed] == MALFORMED[name]
    assert all(m.file.endswith(name) for m in res.malformed)
    assert len(res.records) == GOOD_ROWS[name]
    assert all(r.traj.meta["source_file"].endswith(name) for r in res.records)


def test_strict_stops_naming_file_row_and_field():
    with pytest.raises(MalformedRow) as e:
        read_sources([source("openai_math.jsonl")], strict=True)
    assert (e.value.row, e.value.field) == (7, "messages")
    assert "openai_math.jsonl row 7" in str(e.value) and "'messages'" in str(e.value)


def test_openmanus_row_reads_its_conversations():
    (rec,) = read_sources([source("verl_openmanus.parquet", action_format="react_text")]).records
    t = rec.traj
    assert [s.action for s in t.steps] == ["down", "right"]
    assert t.meta["source_split"] == "train" and t.meta["ability"] == "agent-reasoning"
    assert t.meta["turn_loss"] == [True, True]
    assert json.loads(t.meta["reward_model"]["ground_truth"])[1]["value"].endswith("down")


def test_agentgym_loss_false_turn_is_kept():
    res = read_sources([source("sharegpt_web_train.jsonl", action_format="react_text")])
    (web7,) = [r.traj for r in res.records if r.traj.task_id == "web-7"]
    assert web7.meta["turn_loss"] == [False, True]
    assert web7.steps[0].action == "OK" and web7.steps[1].action.startswith("search[")


def test_fixture_script_reproduces_the_files(tmp_path):
    from tests.curate.fixtures.make_fixtures import write_all

    write_all(tmp_path)
    for name in MALFORMED:
        if name.endswith(".jsonl"):
            assert (tmp_path / name).read_text() == (FIXTURES / name).read_text(), name
        else:
            import pyarrow.parquet as pq

            assert (
                pq.read_table(tmp_path / name).to_pylist()
                == pq.read_table(FIXTURES / name).to_pylist()
            ), name


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    instruction=TEXT,
    turns=st.lists(st.tuples(TEXT, TEXT, st.sampled_from([None, True, False])), max_size=4),
    final=st.one_of(st.none(), TEXT),
    fmt=st.sampled_from(["sharegpt", "openai"]),
)
def test_chat_round_trip_property(tmp_path, instruction, turns, final, fmt):
    """Any text (any unicode, empty strings) survives a chat-format round trip exactly."""
    meta = {} if final is None else {"final_observation": final}
    if any(loss is not None for *_, loss in turns):
        meta["turn_loss"] = [loss for *_, loss in turns]
    t = Trajectory(
        "p", "", instruction=instruction, steps=[Step(o, a) for o, a, _ in turns], meta=meta
    )
    if not (instruction or turns or final is not None):
        return  # an empty conversation is not a row any format can hold
    path = tmp_path / f"p-{fmt}.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossyExportWarning)
        write_format(fmt, path, [t])
    (back,) = _read(path, fmt)
    assert back.instruction == instruction and back.meta.get("final_observation") == final
    assert [(s.observation, s.action) for s in back.steps] == [(o, a) for o, a, _ in turns]
    assert back.meta.get("turn_loss") == meta.get("turn_loss")


def test_json_list_input_counts_rows_from_one(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "up"}]},
            {"messages": [{"role": "user", "content": 3}]}]  # fmt: skip
    (tmp_path / "chat.json").write_text(json.dumps(rows))
    res = read_sources([SourceConfig(path=str(tmp_path / "*.json"))])
    assert len(res.records) == 1 and res.records[0].traj.steps[0].action == "up"
    assert [(m.row, m.field) for m in res.malformed] == [(2, "messages[0].content")]
