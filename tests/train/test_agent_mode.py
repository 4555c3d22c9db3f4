"""`arborl train` with `rollout.mode=agent` (issue 32 req 3): an agent program written with
the `openai` client trains through the gateway, each step's rows its recorded calls, with
the weights current at every step (the version each call used is recorded)."""

from __future__ import annotations

import json

import pytest

from arborl.config import ConfigError
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer

AGENT = [
    "env.id=arborl/ToolQA-v0",
    "model.name_or_path=tiny-0.1m",
    "sft.enabled=false",
    "rollout.mode=agent",
    "agent_program.fn=tests.rollout._agents:parity_agent",
    "agent_program.max_concurrent=4",
    "rollout.num_tasks=4",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "algo.lr=1e-3",
    "eval.num_episodes=2",
    "eval.every=0",
    "trainer.total_steps=2",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.report=false",
    "trainer.loggers=[]",
    "trainer.save_trajectories=8",
    "trainer.num_threads=1",
]


def test_train_an_agent_program(tmp_path):
    cfg = load_train_config([*AGENT, f"trainer.output_dir={tmp_path}", "trainer.name=run"])
    summary = RLTrainer(cfg).fit()
    run = tmp_path / "run"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "actor/pg_loss" in r]
    assert len(steps) == 2 and all(r["rollout/env_errors"] == 0 for r in steps)
    assert summary["before"]["episodes"] == 2 and summary["after"]["episodes"] == 2
    versions = []
    for step in (0, 1):
        lines = (run / "trajectories" / f"step-{step:05d}.jsonl").read_text().splitlines()
        trajs = [json.loads(x) for x in lines]
        assert len(trajs) == 8 and all(len(t["steps"]) == 2 for t in trajs)  # 2 calls each
        versions.append({s["info"]["weight_version"] for t in trajs for s in t["steps"]})
    assert len(versions[0]) == 1 and len(versions[1]) == 1  # one version per step
    assert min(versions[1]) > max(versions[0])  # the update reached the gateway


def test_agent_mode_needs_a_program():
    with pytest.raises(ConfigError, match="agent_program.fn"):
        load_train_config(["rollout.mode=agent", "env.id=arborl/ToolQA-v0"])
    with pytest.raises(ConfigError, match="view"):
        load_train_config([*AGENT, "rollout.view=episode"])
