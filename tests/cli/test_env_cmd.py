"""`arborl env` subcommands run through the real entry point."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from arborl.cli.main import main
from arborl.data.trajectory import read_trajectories
from arborl.envs import make


def test_list(capsys):
    assert main(["env", "list"]) == 0
    out = capsys.readouterr().out
    assert "arborl/Maze-v0" in out and "up|down|left|right" in out and "train/val/test" in out
    line = next(x for x in out.splitlines() if x.startswith("arborl/Sokoban-v0"))
    assert " 30 " in line


def test_list_into_a_closed_pipe_is_quiet():
    """`arborl env list | head`: a reader that leaves early is not an error (no traceback)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE, as after `head` exits
    done = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "env", "list"],
        stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
    )  # fmt: skip
    os.close(write_end)
    assert done.returncode == 0 and "BrokenPipeError" not in done.stderr, done.stderr


def test_check(capsys):
    assert main(["env", "check", "arborl/Game24-v0", "--num-seeds", "1"]) == 0
    assert "OK    arborl/Game24-v0" in capsys.readouterr().out
    assert main(["env", "check", "arborl/Mze-v0"]) == 1
    assert "Did you mean 'arborl/Maze-v0'" in capsys.readouterr().out
    assert main(["env", "check"]) == 2


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_demos_round_trip(tmp_path, capsys, suffix):
    out = tmp_path / f"demos{suffix}"
    code = main(["env", "demos", "arborl/Maze-v0", "--split", "test", "--num-episodes", "5",
                 "--out", str(out), "--seed", "10"])  # fmt: skip
    assert code == 0 and "oracle success: 5/5 (100.0%)" in capsys.readouterr().out
    trajs = read_trajectories(out)
    assert [t.seed for t in trajs] == [10, 11, 12, 13, 14]
    assert all(t.won and t.env_id == "arborl/Maze-v0" and t.meta["split"] == "test" for t in trajs)
    first = trajs[0]
    assert first.steps[-1].terminated and first.steps[-1].reward == 1.0
    assert first.steps[0].observation.count("A") == 1 and first.instruction.startswith("Maze")
    assert first.steps[0].info["task_id"] == first.task_id


def test_demos_with_mistakes_train_only_the_oracles_turns(tmp_path, capsys):
    from arborl.agent import AgentConfig
    from arborl.models import load_tokenizer
    from arborl.train.sft import build_sft_examples

    out = tmp_path / "demos.jsonl"
    argv = ["env", "demos", "arborl/Maze-v0", "--num-episodes", "6", "--epsilon", "0.3",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    trajs = read_trajectories(out)
    losses = [x for t in trajs for x in t.meta["turn_loss"]]
    assert f"{losses.count(False)} of {len(losses)} turns are random mistakes" in printed
    assert 0 < losses.count(False) < len(losses)
    examples = build_sft_examples(trajs, load_tokenizer("tiny-0.1m"), AgentConfig())
    assert len(examples) == losses.count(True)  # the mistakes are never targets
    assert main([*argv[:-2], "--epsilon", "2", "--out", str(out)]) == 2


def test_play_with_piped_stdin(monkeypatch, capsys):
    # Pipe a junk line, then the oracle's own plan for the seed-3 test task.
    env = make("arborl/Game24-v0")
    env.reset(seed=3, options={"split": "test"})
    plan = []
    while not env.done:
        plan.append(env.oracle_action())
        env.step(plan[-1])
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n" + "\n".join(plan) + "\n"))
    assert main(["env", "play", "arborl/Game24-v0", "--seed", "3", "--oracle"]) == 0
    out = capsys.readouterr().out
    assert "(invalid action)" in out and f"(oracle: {plan[0]})" in out
    assert "episode over: won=True return=1" in out


def test_play_ends_at_end_of_input(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("up\n"))
    assert main(["env", "play", "arborl/Maze-v0", "--split", "train"]) == 0
    out = capsys.readouterr().out
    assert "> up" in out and "(end of input)" in out


def test_help_strings(capsys):
    for sub in ("list", "check", "play", "demos"):
        with pytest.raises(SystemExit):
            main(["env", sub, "--help"])
    out = capsys.readouterr().out
    assert "output file, .jsonl or .parquet" in out and "show the oracle's suggested action" in out
