"""A seed names one task (issue 34, review-2 defect 9: `reset(seed=-3)` drew the task of
seed 3, since Python's random seeds with the absolute value, and task files took any seed
without a word)."""

from __future__ import annotations

import json
import logging

import pytest

from arborl.data.tasks import read_task_seeds
from arborl.envs import make, registered_ids
from arborl.envs.remote.host import EnvHost, HostError

BUILTIN = [i for i in registered_ids() if i.startswith("arborl/")]


@pytest.mark.parametrize("env_id", BUILTIN)
def test_a_negative_seed_is_refused_not_aliased(env_id):
    env = make(env_id)
    with pytest.raises(ValueError, match=r"seed=-3.*>= 0.*seed=3"):
        env.reset(seed=-3)
    env.reset(seed=3)  # the seed itself is fine
    env.close()


def test_the_env_server_refuses_a_negative_seed_with_400():
    host = EnvHost("arborl/Maze-v0", b"secret")
    sid = host.create({})["session_id"]
    with pytest.raises(HostError) as e:
        host.call(sid, "reset", {"seed": -1})
    assert e.value.status == 400 and ">= 0" in e.value.detail
    host.call(sid, "reset", {"seed": 1})


def _task_file(tmp_path, seeds):
    rows = [{"data_source": "arborl/Maze-v0", "prompt": [{"role": "user", "content": "x"}],
             "extra_info": {"task_id": f"t{i}", "seed": s, "env_split": "train"}}
            for i, s in enumerate(seeds)]  # fmt: skip
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_task_file_with_a_negative_seed_names_the_row(tmp_path):
    path = _task_file(tmp_path, [0, 1, -2])
    with pytest.raises(ValueError, match=r"row 3: extra_info.seed=-2 is negative"):
        read_task_seeds(path, "arborl/Maze-v0", "train")


def test_a_task_file_that_repeats_seeds_is_read_with_a_warning(tmp_path, caplog):
    path = _task_file(tmp_path, [5, 5, 5, 6, 7, 7])
    with caplog.at_level(logging.WARNING, logger="arborl"):
        assert read_task_seeds(path, "arborl/Maze-v0", "train") == [5, 5, 5, 6, 7, 7]
    assert "repeats 2 seed(s) (5 x3, 7 x2)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="arborl"):
        read_task_seeds(_task_file(tmp_path, [1, 2, 2**200]), "arborl/Maze-v0", "train")
    assert "repeats" not in caplog.text
