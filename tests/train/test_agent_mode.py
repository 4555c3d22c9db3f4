"""`arborl train` with `rollout.mode=program` (issue 32 req 3): an agent program written with
the `openai` client trains through the gateway, each step's rows its recorded calls, with
the weights current at every step (the version each call used is recorded), through one
gateway the engine keeps for the run (issue 46 #3)."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace

import pytest
import torch

from arborl.config import ConfigError
from arborl.train.config import load_train_config
from arborl.train.engine import LocalEngine, RolloutPlan
from arborl.train.rl import RLTrainer
from arborl.train.rollout_modes import get_rollout_mode

AGENT = [
    "env.id=arborl/ToolQA-v0",
    "model.name_or_path=tiny-0.1m",
    "sft.enabled=false",
    "rollout.mode=program",
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
        load_train_config(["rollout.mode=program", "env.id=arborl/ToolQA-v0"])
    with pytest.raises(ConfigError, match="view"):
        load_train_config([*AGENT, "rollout.view=episode"])


def _served(engine):
    """The run's gateway (the one `RunServices` holds; asking again starts none)."""
    mode = get_rollout_mode("agent")
    return engine.services.get(mode, engine.backend, engine.tokenizer, engine.cfg)


def test_one_gateway_serves_the_whole_run_with_the_live_weights(tmp_path):
    cfg = load_train_config([*AGENT, f"trainer.output_dir={tmp_path}"])
    engine = LocalEngine(cfg)
    try:
        first = engine.rollout(RolloutPlan(0, [0, 1, 2, 3], replace(cfg.rollout, seed=1)))
        gateway = _served(engine)
        url = gateway.url
        old = {k: v.clone() for k, v in engine.model.state_dict().items()}
        torch.manual_seed(0)
        with torch.no_grad():  # an update, as the optimizer writes it: in place
            for p in engine.model.parameters():
                p.add_(0.2 * torch.randn_like(p))
        second = engine.rollout(RolloutPlan(1, [0, 1, 2, 3], replace(cfg.rollout, seed=2)))
        assert _served(engine) is gateway and gateway.url == url  # no server per step
        v1, v2 = ({s.info["weight_version"] for t in o.trajectories for s in t.steps}
                  for o in (first, second))  # fmt: skip
        assert len(v1) == len(v2) == 1 and min(v2) > max(v1)
        # the second step's tokens were sampled by the updated weights, not the old ones
        b, mask = second.batch, second.batch["response_mask"].bool()
        temp = b.info["temperature"]
        now = engine.policy_logp(b, temp)
        torch.testing.assert_close(now[mask], b["old_logp"][mask], atol=1e-4, rtol=1e-4)
        engine.model.load_state_dict(old)
        before = engine.policy_logp(b, temp)
        assert (before[mask] - b["old_logp"][mask]).abs().max() > 0.05
        engine.evaluate(2)  # the evaluation: the same gateway, envs from the run's pools
        assert _served(engine) is gateway and gateway.url == url
        assert any(cfg.env.eval_split in key for key in engine.pools.pools)
    finally:
        engine.close()
    with pytest.raises(OSError):  # closed with the engine, as the pools are
        urllib.request.urlopen(f"{url}/v1/models", timeout=5)
