"""`arborl/Tasks-v0` (issue 48 req 6): the user's own tasks from a JSONL file (prompt,
hidden data, answer) with no env to write; the agent program gets the row, its answer is
graded by exact match, and the run's report shows the user's task text with no random or
oracle line."""

from __future__ import annotations

import json

import pytest

from arborl.envs import make, spec
from arborl.envs.builtin.tasklist import read_tasks, same_answer

ROWS = [
    {"id": "milk", "prompt": "Price of milk?", "data": {"prices": {"milk": 42}}, "answer": "42",
     "split": "train"},
    {"id": "rice", "prompt": "Price of rice?", "data": {"prices": {"rice": 17}}, "answer": 17,
     "split": "train"},
    {"id": "tea", "prompt": "Price of tea?", "data": {"prices": {"tea": 29}}, "answer": "29",
     "split": "test"},
    {"id": "salt", "prompt": "Price of salt?", "data": {"prices": {"salt": 11}}, "answer": "11",
     "split": "test"},
]  # fmt: skip


@pytest.fixture
def task_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_rows_by_split_graded_by_exact_match(task_file):
    env = make("arborl/Tasks-v0", path=str(task_file), split="test")
    obs, info = env.reset(seed=5)
    assert obs == env.instruction and obs in ("Price of tea?", "Price of salt?")
    assert env.task["data"]["prices"] and info["task_id"] in ("tea", "salt")
    _, _, terminated, truncated, info = env.step("not a number")  # the reference is a number
    assert info["valid_action"] is False and (terminated, truncated) == (False, False)  # a retry
    _, _, terminated, truncated, info = env.step("still no number")
    assert info["valid_action"] is False and (terminated, truncated) == (False, True)  # 2 turns
    env.reset(seed=5)
    _, reward, terminated, _, info = env.step(f"  {env.task['answer']} ")
    assert (reward, terminated, info["won"]) == (1.0, True, True)
    assert {make("arborl/Tasks-v0", path=str(task_file)).reset(seed=s)[1]["task_id"]
            for s in range(20)} == {"milk", "rice"}  # fmt: skip
    assert spec("arborl/Tasks-v0").baselines is False


def test_same_answer_and_file_errors(tmp_path):
    assert same_answer(" The  Answer ", "the answer") and same_answer("17.0", 17)
    assert not same_answer("18", "17")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"question": "b"}\n')
    with pytest.raises(ValueError, match=r'bad.jsonl:2: expected an object with a string "prompt"'):
        read_tasks(bad)
    bad.write_text('{"prompt": "a", "split": "dev"}\n')
    with pytest.raises(ValueError, match="split='dev' is not one of"):
        read_tasks(bad)
    with pytest.raises(FileNotFoundError, match="env.kwargs.path"):
        read_tasks(tmp_path / "none.jsonl")


def test_agent_mode_on_a_task_file(task_file, tmp_path, capsys):
    from arborl.cli.main import main

    out = tmp_path / "runs"
    code = main([
        "train", "rollout.mode=program", "env.id=arborl/Tasks-v0", f"env.kwargs.path={task_file}",
        "agent_program.fn=tests.envs._task_agent:lookup_agent", "model.name_or_path=tiny-0.1m",
        "sft.enabled=false", "rollout.num_tasks=2", "rollout.group_size=2",
        "rollout.max_new_tokens=4", "eval.num_episodes=2", "trainer.total_steps=1",
        "trainer.progress=false", "trainer.plots=false", "trainer.num_threads=1",
        f"trainer.output_dir={out}", "trainer.name=own", "trainer.save_trajectories=4",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "for scale" not in printed and "errored" not in printed
    run = out / "own"
    assert json.loads((run / "baselines.json").read_text()) == {}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["failures"]["verdict"] == "" and summary["failures"]["rows_trained"] > 0
    trajs = [json.loads(x) for x in (run / "trajectories" / "step-00000.jsonl").open()]
    # even episodes answer from the row's hidden data and win; odd ones answer 0 and lose
    assert [t["won"] for t in trajs] == [True, False, True, False]
    assert {t["instruction"] for t in trajs} <= {"Price of milk?", "Price of rice?"}
    page = (run / "report.html").read_text()
    assert "Price of milk?" in page or "Price of rice?" in page
    assert "random policy" not in page
