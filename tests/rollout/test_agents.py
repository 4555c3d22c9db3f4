"""Agents as environments (issue 32 req 3): programs run against the gateway, their recorded
calls become token-exact step rows, GRPO groups are repeated tasks, and a program that
crashes, hangs or gives no reward ends only its own episode."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

from arborl.envs import make_pool
from arborl.generation import HFBackend
from arborl.models import load_policy
from arborl.rollout import RolloutConfig
from arborl.rollout.agent_config import AgentProgramConfig
from arborl.rollout.agents import run_agent_rollout
from arborl.train.rows import drop_env_errors

ENV = "arborl/ToolQA-v0"


@pytest.fixture(scope="module")
def policy():
    model, tok = load_policy("tiny-0.1m", seed=0)
    return HFBackend(model.eval(), tok), tok


def _rollout(policy, program: AgentProgramConfig, num_tasks: int, group_size: int = 2):
    backend, tok = policy
    cfg = RolloutConfig(num_tasks=num_tasks, group_size=group_size, max_new_tokens=8, seed=3)
    pool = make_pool(ENV, num_tasks * group_size, "inproc")
    try:
        return run_agent_rollout(backend, tok, pool, list(range(num_tasks)), cfg, program,
                                 env_id=ENV)  # fmt: skip
    finally:
        pool.close()


def test_rows_are_the_recorded_calls(policy):
    res = _rollout(policy, AgentProgramConfig(fn="tests.rollout._agents:parity_agent"), 2)
    b, eps = res.batch, res.episodes
    assert len(b) == 8 and res.stats["agent_calls"] == 8  # 4 episodes x 2 calls, 1 row each
    assert [ep.group_id for ep in eps] == [0, 0, 1, 1]
    assert eps[0].task_id == eps[1].task_id != eps[2].task_id  # a group is one task
    p = b.info["prompt_length"]
    for r, t in enumerate(t for ep in eps for t in ep.turns):
        n, a = len(t.prompt_ids), len(t.response_ids)
        assert b["input_ids"][r, p - n : p].tolist() == t.prompt_ids
        assert b["input_ids"][r, p : p + a].tolist() == t.response_ids
        torch.testing.assert_close(b["old_logp"][r, :a], torch.tensor(t.logprobs))
        assert t.info["weight_version"] == 0 and t.info["session"]
    last = b.meta["done"].astype(bool)
    rewards = b["step_reward"]
    assert rewards[~torch.as_tensor(last)].abs().sum() == 0  # the reward is on the last row
    assert set(rewards[torch.as_tensor(last)].tolist()) <= {0.0, 1.0}
    assert res.stats["env_errors"] == 0
    # the same seeds sample the same: a repeated rollout gives the same rows
    again = _rollout(policy, AgentProgramConfig(fn="tests.rollout._agents:parity_agent"), 2)
    assert torch.equal(again.batch["input_ids"], b["input_ids"])


def test_failures_end_only_their_own_episode(policy):
    cfg = AgentProgramConfig(fn="tests.rollout._agents:mixed_agent", timeout_s=2.0)
    t0 = time.monotonic()
    res = _rollout(policy, cfg, 3)  # episodes 0..5: fine, crash, hang, none, answer, dict
    assert time.monotonic() - t0 < 40  # the hang cost its deadline (2 s), not its 60 s
    why = [t.meta["truncation_reason"] for t in res.trajectories]
    assert why == ["", "env_error", "env_error", "env_error", "", ""]
    assert "the agent's tool broke" in res.trajectories[1].meta["env_error"]
    assert "timeout_s=2" in res.trajectories[2].meta["env_error"]
    assert "no_reward" in res.trajectories[3].meta["env_error"]
    s = res.stats
    assert (s["agent_crashed"], s["agent_timeout"], s["agent_no_reward"]) == (1, 1, 1)
    returns = [ep.total_return for ep in res.episodes]
    assert returns[0] == 1.0 and returns[4] == 0.0 and returns[5] == 0.5  # answer[0]: wrong
    batch, kept, _, errors = drop_env_errors(res.batch, res.trajectories)
    assert len(errors) == 3 and len(kept) == 3 and len(batch) == 3
    assert set(batch.meta["traj_id"]) == {res.trajectories[i].meta["traj_id"] for i in (0, 4, 5)}


def test_async_agent_and_reward_function(policy):
    cfg = AgentProgramConfig(fn="tests.rollout._agents:async_agent", timeout_s=2.0,
                             reward="tests.rollout._agents:score_calls")  # fmt: skip
    res = _rollout(policy, cfg, 1)
    assert [t.meta["truncation_reason"] for t in res.trajectories] == ["", "env_error"]
    assert res.episodes[0].total_return == 1.0  # score_calls: one call


def test_command_line_agent(policy):
    script = Path(__file__).with_name("_cmd_agent.py")
    cfg = AgentProgramConfig(command=f"{sys.executable} {script}", timeout_s=60.0)
    res = _rollout(policy, cfg, 1)
    assert [t.meta["truncation_reason"] for t in res.trajectories] == ["", "env_error"]
    assert "no luck" in res.trajectories[1].meta["env_error"]
    assert res.episodes[0].total_return in (0.0, 1.0) and len(res.batch) == 2


def test_config_checks():
    with pytest.raises(ValueError, match="both set"):
        AgentProgramConfig(fn="a.b:c", command="x")
    with pytest.raises(ValueError, match="package.module:function"):
        AgentProgramConfig(fn="nope")
    with pytest.raises(ValueError, match="timeout_s"):
        AgentProgramConfig(timeout_s=0)


def _rollout_within(policy, program: AgentProgramConfig, num_tasks: int, limit_s: float):
    """`_rollout`, failing (not hanging) if it has not returned within `limit_s`."""
    import threading

    box: dict = {}

    def run():
        try:
            box["res"] = _rollout(policy, program, num_tasks)
        except BaseException as e:  # noqa: BLE001 - reported below
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"the rollout did not return within {limit_s} s"
    if "error" in box:
        raise box["error"]
    return box["res"], time.monotonic() - t0


@pytest.mark.fault("async agent ignores its deadline")
def test_an_async_agent_deaf_to_its_deadline_is_a_counted_timeout(policy):
    # episode 0 swallows every cancel, episode 1 blocks its loop in time.sleep(60)
    cfg = AgentProgramConfig(fn="tests.rollout._agents:deaf_agent", timeout_s=2.0)
    res, took = _rollout_within(policy, cfg, 1, 120)
    assert took < 40  # both cost their 2 s deadline (+ a loaded machine), not 60 s or ever
    assert [t.meta["truncation_reason"] for t in res.trajectories] == ["env_error"] * 2
    assert all("timeout_s=2" in t.meta["env_error"] for t in res.trajectories)
    assert res.stats["agent_timeout"] == 2 and res.stats["env_errors"] == 2


@pytest.mark.fault("out-of-range reward")
def test_a_reward_no_float_holds_is_a_counted_error_not_a_crash(policy):
    cfg = AgentProgramConfig(fn="tests.rollout._agents:bad_number_agent", timeout_s=60.0)
    res = _rollout(policy, cfg, 3)  # 10**400, nan, -inf, 1e7, {"reward": 10**400}, 0.5
    why = [t.meta.get("env_error", "") for t in res.trajectories]
    assert [t.meta["truncation_reason"] for t in res.trajectories] == ["env_error"] * 5 + [""]
    assert "is an int of about 400 digits, past a float" in why[0]
    assert "is nan, not finite" in why[1] and "is -inf, not finite" in why[2]
    assert "is 1e+07, beyond +-1e+06" in why[3] and "about 400 digits" in why[4]
    assert all("agent no_reward" in w and "MAX_ABS_REWARD" in w for w in why[:5])
    assert res.stats["agent_no_reward"] == 5 and res.episodes[5].total_return == 0.5
    batch, kept, _, errors = drop_env_errors(res.batch, res.trajectories)
    assert len(errors) == 5 and torch.isfinite(batch["step_reward"]).all()


@pytest.mark.fault("out-of-range reward")
def test_a_reward_fn_or_command_past_float_is_a_counted_error(policy):
    cfg = AgentProgramConfig(fn="tests.rollout._agents:parity_agent", timeout_s=60.0,
                             reward="tests.rollout._agents:big_reward")  # fmt: skip
    res = _rollout(policy, cfg, 1)
    assert all("agent_program.reward returned is an int" in t.meta["env_error"]
               for t in res.trajectories)  # fmt: skip
    script = Path(__file__).with_name("_cmd_faults.py")
    cfg = AgentProgramConfig(command=f"{sys.executable} {script} bigint", timeout_s=60.0)
    res = _rollout(policy, cfg, 1)  # it prints a 401-digit JSON integer
    assert res.stats["agent_no_reward"] == 2 and res.stats["env_errors"] == 2


def test_a_fn_run_in_its_own_process(policy):
    # a child process imports `openai` (seconds on a loaded machine): a roomy deadline;
    # the kill at the deadline is test_agent_run.py's (the same command runner)
    cfg = AgentProgramConfig(fn="tests.rollout._agents:mixed_agent", process=True, timeout_s=60.0)
    res = _rollout(policy, cfg, 1)  # episode 0 fine, 1 crashes
    assert [t.meta["truncation_reason"] for t in res.trajectories] == ["", "env_error"]
    assert "the agent's tool broke" in res.trajectories[1].meta["env_error"]
    assert res.episodes[0].total_return == 1.0 and res.stats["agent_calls"] == 2
    with pytest.raises(ValueError, match="process=true runs agent_program.fn"):
        AgentProgramConfig(command="x", process=True)
