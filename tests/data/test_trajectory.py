"""Trajectory records survive JSONL and parquet round trips exactly, are written
atomically, and bad files fail with the file and line that are wrong."""

import json

import pytest

from arborl.data import Step, Trajectory, iter_trajectories, read_trajectories, write_trajectories


def _trajectories() -> list[Trajectory]:
    return [
        Trajectory(
            task_id="maze/3",
            env_id="arborl/Maze-v0",
            seed=7,
            instruction="Reach the goal.",
            steps=[
                Step("start", "left", reward=0.0, info={"pos": [0, 1], "note": None}),
                Step(
                    "wall",
                    "up",
                    reward=1.5,
                    terminated=True,
                    info={"won": True, "nested": {"a": 1.25}},
                    response="Thought: go up.\nAction: up",
                ),
            ],
            won=True,
            meta={"policy": "oracle", "group_id": 2, "split": "train"},
        ),
        Trajectory(task_id="calc/9", env_id="arborl/ToolQA-v0", seed=None),  # no steps
        Trajectory(
            task_id="calc/10",
            env_id="arborl/ToolQA-v0",
            seed=0,
            steps=[Step("q", "answer 4", reward=-0.25, truncated=True)],
            meta={"unicode": "ünï ✓"},
        ),
    ]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip(tmp_path, suffix: str) -> None:
    trajs = _trajectories()
    path = write_trajectories(tmp_path / f"out{suffix}", trajs)
    back = read_trajectories(path)
    assert back == trajs
    assert back[1].seed is None and back[1].steps == []
    assert back[0].total_return == 1.5 and back[0].num_steps == 2
    assert list(iter_trajectories(path)) == trajs


def test_jsonl_records_carry_total_return(tmp_path) -> None:
    path = write_trajectories(tmp_path / "t.jsonl", _trajectories())
    first = json.loads(path.read_text().splitlines()[0])
    assert first["total_return"] == 1.5 and first["steps"][1]["response"].startswith("Thought")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_atomic_write_leaves_no_temp_files(tmp_path, suffix: str) -> None:
    write_trajectories(tmp_path / "sub" / f"t{suffix}", _trajectories())  # makes the folder
    write_trajectories(tmp_path / "sub" / f"t{suffix}", _trajectories()[:1])  # overwrite
    assert [p.name for p in (tmp_path / "sub").iterdir()] == [f"t{suffix}"]
    assert len(read_trajectories(tmp_path / "sub" / f"t{suffix}")) == 1


def test_failed_write_keeps_the_previous_file(tmp_path) -> None:
    path = write_trajectories(tmp_path / "t.jsonl", _trajectories())
    before = path.read_text()
    bad = Trajectory("x", "e", steps=[Step("o", "a", info={"obj": object()})])
    with pytest.raises(TypeError):
        write_trajectories(path, [*_trajectories(), bad])
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


def test_malformed_jsonl_line_names_file_and_line(tmp_path) -> None:
    path = write_trajectories(tmp_path / "t.jsonl", _trajectories()[:2])
    with open(path, "a") as f:
        f.write("\n")  # blank lines are skipped and still counted
        f.write('{"task_id": "broken", "env_id": \n')
    with pytest.raises(ValueError, match=rf"{path}:4: not a trajectory record"):
        read_trajectories(path)


def test_record_without_required_fields(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"env_id": "e"}) + "\n")
    with pytest.raises(ValueError, match=r"t.jsonl:1: .*lacks required field\(s\) \['task_id'\]"):
        read_trajectories(path)


def test_unknown_suffix(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"suffix '.csv'; use .jsonl or .parquet"):
        write_trajectories(tmp_path / "t.csv", _trajectories())
    (tmp_path / "t.csv").write_text("task_id\n")
    with pytest.raises(ValueError, match=r"suffix '.csv'; use .jsonl or .parquet"):
        read_trajectories(tmp_path / "t.csv")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_trajectories(tmp_path / "missing.jsonl")


def test_total_return_by_hand() -> None:
    # 0.0 + 1.5 = 1.5 for the first; -0.25 for the third; an empty episode returns 0.
    assert [t.total_return for t in _trajectories()] == [1.5, 0.0, -0.25]
