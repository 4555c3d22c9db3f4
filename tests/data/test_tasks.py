"""Task files fail with the file and row on every bad line, and seeds are never rounded
(issue 19, review defect 16)."""

import json

import pytest

from arborl.data.tasks import read_task_seeds

ENV = "arborl/Maze-v0"


def _row(seed) -> str:
    return json.dumps({"data_source": ENV, "prompt": [], "extra_info": {"seed": seed}})


@pytest.mark.parametrize(
    "lines,match",
    [
        ([_row(1), "{not json"], r"tasks.jsonl:2: not valid JSON"),
        ([_row(1), "[1, 2]"], r"tasks.jsonl row 2: expected a JSON object, got list"),
        ([json.dumps({"data_source": ENV, "extra_info": "{bad"})], r"row 1: extra_info is a str"),
        ([json.dumps({"data_source": ENV, "extra_info": [1]})], r"row 1: extra_info must be an"),
        ([_row(1), _row(1.7)], r"row 2: extra_info.seed=1.7 is not an integer"),
        ([_row(True)], r"row 1: extra_info.seed=True is not an integer"),
    ],
    ids=["bad-json", "not-object", "extra-not-json", "extra-list", "float-seed", "bool-seed"],
)
def test_a_bad_task_row_names_file_and_row(tmp_path, lines, match):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=match):
        read_task_seeds(path, ENV, "train")


def test_a_latin1_task_file_names_the_path(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(_row(3).encode() + b"\n" + b'{"x": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl: not UTF-8 text"):
        read_task_seeds(path, ENV, "train")
    path.write_text(_row(3) + "\n" + _row(4) + "\n")
    assert read_task_seeds(path, ENV, "train") == [3, 4]


def test_a_non_utf8_trajectory_line_names_file_and_line(tmp_path):
    from arborl.data import Trajectory, read_trajectories, write_trajectories

    path = tmp_path / "t.jsonl"
    write_trajectories(path, [Trajectory(task_id="a", env_id=ENV)])
    path.write_bytes(path.read_bytes() + b'{"task_id": "caf\xe9", "env_id": "x"}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:2: not UTF-8 text"):
        read_trajectories(path)
