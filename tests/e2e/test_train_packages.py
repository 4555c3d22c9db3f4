"""`arborl train` on the real-benchmark env packages at toy size (issue 17, requirement 6).

The SFT warm start's oracle demos, the RL rollouts and both evaluations run in the
package's venv through out-of-process pools (the env code imports only there: an
in-process demo collection failed with "no env registered"), and a worker killed with
SIGKILL mid-rollout ends only its own episode while training goes on.
"""

import json
import os
import signal
from pathlib import Path

import pytest

from arborl.cli.main import main
from arborl.data import read_trajectories
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer
from arborl.train.runlog import read_metrics
from tests._status import owed_status
from tests.envs.packages._real import set_up

pytestmark = pytest.mark.slow  # JVM / minigrid workers and a few RL steps: ~1-2 min each

TOY = ["model.name_or_path=tiny-0.1m", "sft.num_demos=6", "sft.steps=30", "sft.batch_size=8",
       "sft.lr=3e-3", "sft.warmup_steps=2", "rollout.num_tasks=2", "rollout.group_size=2",
       "eval.num_episodes=4", "eval.every=0", "trainer.total_steps=2", "trainer.plots=false",
       "trainer.progress=false", "trainer.report=false"]  # fmt: skip


def _train(tmp_path, name: str, *overrides: str) -> list[dict]:
    """Run `arborl train` and return its metrics records."""
    args = ["train", *overrides, *TOY, f"trainer.output_dir={tmp_path}", f"trainer.name={name}"]
    assert main(args) == owed_status(tmp_path / name)  # 3: a toy run that learned nothing
    return read_metrics(tmp_path / name / "metrics.jsonl")


def _check_run(recs: list[dict], num_demos: int = 6) -> None:
    """The warm start learned from won demos, both RL steps ran, both evaluations counted
    every episode, and no env call failed."""
    sft = next(r for r in recs if r.get("phase") == "sft")
    assert sft["sft/demos_won"] == num_demos  # the oracle's demos, every one won
    assert sft["sft/loss"] < 0.6 * sft["sft/first_loss"]  # 30 steps on them: the loss fell
    steps = [r for r in recs if "train/success" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["rollout/env_errors"] == 0.0 and r["train/env_steps"] > 0 for r in steps)
    before = next(r for r in recs if "eval/success" in r)
    after = next(r for r in recs if "eval/final_success" in r)
    assert before["eval/env_errors"] == after["eval/final_env_errors"] == 0.0
    assert 0.0 <= before["eval/success"] <= 1.0 and 0.0 <= after["eval/final_success"] <= 1.0


def _make_demo_overrides() -> list[str]:
    """The `arborl train` overrides of `make demo` (the Makefile's DEMO variable)."""
    text = (Path(__file__).parents[2] / "Makefile").read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("DEMO :="))
    return line.split(":=", 1)[1].split()


def test_make_demo_recipe_at_toy_size_on_twx_coin_in_subprocess_mode(tmp_path, monkeypatch, capsys):
    """`make demo`'s own overrides (scoring the valid actions), shrunk by TOY: it trains,
    and the console ends with the random policy and oracle on the same tasks."""
    set_up("twx", monkeypatch)
    demo = _make_demo_overrides()
    assert "env=twx_coin" in demo and "agent.action_mode=score" in demo
    args = ["train", *demo, *TOY, "trainer.report=true", f"trainer.output_dir={tmp_path}"]
    assert main([*args, "trainer.name=twx"]) == owed_status(tmp_path / "twx")
    recs = read_metrics(tmp_path / "twx" / "metrics.jsonl")
    _check_run(recs)
    steps = [r for r in recs if "train/success" in r]
    assert all(r["train/invalid_rate"] == 0.0 for r in steps)  # chosen from the list
    out = capsys.readouterr().out
    assert "held-out success before RL" in out and "RL gain on the same tasks" in out
    base = json.loads((tmp_path / "twx" / "baselines.json").read_text())
    assert base["oracle"]["success"] == 1.0
    assert f"random policy {base['random']['success']:.3f}" in out
    assert "oracle 1.000" in out and "for scale, same tasks" in out


def test_train_with_sft_warm_start_on_babyai_in_http_mode(tmp_path, monkeypatch):
    set_up("babyai", monkeypatch)
    _check_run(_train(tmp_path, "babyai", "env=babyai", "env.pool_mode=http"))


def test_arborl_sft_on_babyai_evaluates_in_its_pool_mode(tmp_path, monkeypatch):
    # `arborl sft`'s held-out evaluation ran in-process: "cannot import module 'babyai_env'".
    set_up("babyai", monkeypatch)
    out = tmp_path / "sft"
    assert main(["sft", "env=babyai", *TOY, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sft"]["sft/demos_won"] == 6.0
    assert summary["sft"]["sft/loss"] < 0.6 * summary["sft"]["sft/first_loss"]
    assert summary["after"]["episodes"] == 4.0 and summary["after"]["env_errors"] == 0.0
    assert (out / "checkpoints" / "sft" / "policy" / "model.safetensors").exists()


def test_a_worker_killed_mid_rollout_ends_only_its_episode(tmp_path, monkeypatch):
    """16 episodes in 16 subprocess workers (env.num_workers=16: one env each, so a crash
    ends one episode; the default spreads envs over one worker per core); worker 1 is
    SIGKILLed before the second turn
    of RL step 1. Its episode ends as an env error and leaves the update; the other 15 run
    to the turn limit; step 2 restarts the worker and runs all 16."""
    set_up("babyai", monkeypatch)
    cfg = load_train_config([
        "env=babyai", "env.num_workers=16", "model.name_or_path=tiny-0.1m", "sft.enabled=false",
        "rollout.num_tasks=4", "rollout.group_size=4", "rollout.max_turns=3",
        "eval.num_episodes=2", "eval.every=0", "trainer.total_steps=2", "trainer.plots=false",
        "trainer.progress=false", "trainer.report=false", f"trainer.output_dir={tmp_path}",
        "trainer.name=kill",
    ])  # fmt: skip
    trainer = RLTrainer(cfg)
    pool = trainer.engine.pool
    assert pool.transport.num_workers == 16
    real_step, calls, victim = pool.step, [], []

    def step(actions):
        calls.append(len(actions))
        if len(calls) == 2:  # every episode has taken one turn: kill worker 1 now
            victim.append(pool.transport.workers[1].pid)
            os.kill(victim[0], signal.SIGKILL)
        return real_step(actions)

    monkeypatch.setattr(pool, "step", step)
    pids = []  # worker 1's process after each RL step (fit closes the pool at the end)
    trainer.callbacks.append(lambda t: pids.append(pool.transport.workers[1].pid))
    summary = trainer.fit()
    assert summary["steps"] == 2
    recs = [r for r in read_metrics(tmp_path / "kill" / "metrics.jsonl") if "train/success" in r]
    assert [(r["step"], r["rollout/env_errors"]) for r in recs] == [(1, 1.0), (2, 0.0)]
    # trajectories/step-N.jsonl are numbered from 0: step-00000 is RL step 1.
    first = read_trajectories(tmp_path / "kill" / "trajectories" / "step-00000.jsonl")
    reasons = [t.meta["truncation_reason"] for t in first]
    # Its first turn, and the turn whose step call found the worker dead.
    assert reasons[1] == "env_error" and first[1].num_steps == 2
    assert reasons[:1] + reasons[2:] == ["max_turns"] * 15
    assert all(t.num_steps == 3 for i, t in enumerate(first) if i != 1)
    second = read_trajectories(tmp_path / "kill" / "trajectories" / "step-00001.jsonl")
    assert [t.meta["truncation_reason"] for t in second] == ["max_turns"] * 16
    assert pool.transport.num_restarts == 1 and pids[1] != victim[0]  # restarted for step 2
