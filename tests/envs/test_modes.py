"""One pool interface, isolation modes inproc / subprocess / http: same results, same
rollout code, `check_env` through the pool, failures confined to their episode."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from arborl.envs import (
    EnvErrorBudgetExceeded,
    EnvPool,
    RemotePool,
    check_env,
    make_pool,
)
from arborl.rollout import RolloutConfig
from arborl.rollout.loop import run_episodes_with_policy
from arborl.rollout.policies import OraclePolicy

from ._pkg import *  # noqa: F403
from ._pkg import COUNTER_ID
from ._pool_protocol import ProtocolOnly, check_pool_protocol

MODE_KW = {"inproc": {}, "subprocess": {"num_workers": 2}, "http": {"replicas": 2}}


@pytest.mark.parametrize("mode", list(MODE_KW))
def test_same_results_and_check_env_in_every_mode(mode):
    pool = make_pool("arborl/Maze-v0", 4, mode=mode, split="test", **MODE_KW[mode])
    ref = EnvPool("arborl/Maze-v0", 4, split="test")
    try:
        assert isinstance(pool, EnvPool if mode == "inproc" else RemotePool)
        obs, infos = pool.reset([11, 12], group_size=2)
        assert (obs, infos) == ref.reset([11, 12], group_size=2)
        actions = ["up", None, "left", "nonsense"]
        assert pool.step(actions) == ref.step(actions)
        assert pool[0].max_turns == ref[0].max_turns and pool[2].instruction == ref[2].instruction
        assert check_env(pool[1], num_seeds=2) == []
    finally:
        pool.close()


def test_a_plain_registered_env_reaches_subprocess_workers(monkeypatch):
    """An env registered here (not a package, not built in) is registered in the workers."""
    from pathlib import Path

    from arborl.envs import register

    root = str(Path(__file__).resolve().parents[2])  # the workers import tests.envs.… from it
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    register("user/WorkerDigit-v0", entry_point="tests.envs.user_env_example:GuessDigitEnv")
    pool = make_pool("user/WorkerDigit-v0", 2, mode="subprocess")
    ref = EnvPool("user/WorkerDigit-v0", 2)
    try:
        assert pool.reset([3], group_size=2) == ref.reset([3], group_size=2)
        assert pool.step(["7", "1"]) == ref.step(["7", "1"])
    finally:
        pool.close()


def test_http_batched_and_single_calls_give_the_same_results():
    """`/batch` (the default) and one request per call (`batch_calls=False`) agree."""
    pools = [make_pool("arborl/Maze-v0", 4, mode="http", split="test", replicas=1,
                       batch_calls=b) for b in (True, False)]  # fmt: skip
    try:
        assert pools[0].transport.batch_calls and not pools[1].transport.batch_calls
        got = [(p.reset([11, 12], group_size=2), p.step(["up", None, "left", "no"])) for p in pools]
        assert got[0] == got[1]
        assert not pools[0].transport.no_batch  # the batch route answered
    finally:
        for p in pools:
            p.close()


@pytest.mark.parametrize("mode", list(MODE_KW))
def test_every_mode_s_pool_satisfies_the_pool_protocol(mode):
    pool = make_pool("arborl/Maze-v0", 4, mode=mode, split="test", **MODE_KW[mode])
    try:
        check_pool_protocol(pool)
    finally:
        pool.close()


def test_protocol_only_view_refuses_other_members():
    pool = EnvPool("arborl/Maze-v0", 2)
    with pytest.raises(AttributeError, match="'envs' is not a member of the Pool protocol"):
        _ = ProtocolOnly(pool).envs


@pytest.mark.parametrize("mode", list(MODE_KW))
def test_rollout_loop_drives_every_mode(mode):
    cfg = RolloutConfig(num_tasks=3, group_size=2, seed=5)
    ref = run_episodes_with_policy(OraclePolicy(), "arborl/Maze-v0", None, cfg, split="test")
    pool = make_pool("arborl/Maze-v0", 6, mode=mode, split="test", **MODE_KW[mode])
    try:
        got = run_episodes_with_policy(OraclePolicy(), pool, None, cfg, split="test")
    finally:
        pool.close()
    assert got.stats["success"] == ref.stats["success"] == 1.0
    assert [len(t.steps) for t in got.trajectories] == [len(t.steps) for t in ref.trajectories]
    assert [t.task_id for t in got.trajectories] == [t.task_id for t in ref.trajectories]
    assert got.trajectories[0].env_id == "arborl/Maze-v0"


@pytest.mark.parametrize("mode", ["subprocess", "http"])
def test_package_env_runs_in_its_own_venv(counter_interp, mode):
    kw = {"replicas": 2} if mode == "http" else {}
    pool = make_pool(COUNTER_ID, 4, mode=mode, **kw)
    try:
        assert check_env(pool[3], num_seeds=2) == []
        obs, infos = pool.reset([1, 2], group_size=2)
        assert all(o.startswith("value 0, target ") for o in obs) and pool[0].max_turns == 12
        res, done = pool.step(["inc", "dec", "inc", "junk"])
        assert res[0].obs.startswith("value 1,") and res[1].obs.startswith("value -1,")
        assert not res[3].info["valid_action"] and res[3].info["available_actions"] == [
            "inc",
            "dec",
        ]
        assert infos[0]["anchor"] == (infos[0]["anchor"][0], 0)  # tuples again after the wire
    finally:
        pool.close()


def test_package_default_mode_is_the_manifest_s(counter_interp):
    pool = make_pool(COUNTER_ID, 2)
    try:
        assert pool.mode == "subprocess"
        assert "worker pid" in pool.transport.where(0)
    finally:
        pool.close()


@pytest.mark.fault("hanging env", "raising env")
@pytest.mark.parametrize("mode", ["subprocess", "http"])
def test_failed_call_ends_only_its_episode(counter_interp, mode):
    kw = {"replicas": 1} if mode == "http" else {}
    pool = make_pool(COUNTER_ID, 3, mode=mode, timeout_s=1.5, max_env_errors=5, **kw)
    try:
        pool.reset([1, 2, 3])
        start = time.perf_counter()
        res, done = pool.step(["__raise__", "__sleep__", "inc"])  # raise, hang (30 s), fine
        assert time.perf_counter() - start < 10.0  # the hung call timed out at 1.5 s
        assert (
            "broke on purpose" in res[0].info["env_error"] and "timeout" in res[1].info["env_error"]
        )
        assert res[0].truncated and res[1].truncated and done[:2] == [True, True]
        assert res[2].obs.startswith("value 1,") and "env_error" not in res[2].info and not done[2]
        assert pool.num_env_errors == 2
        res, _ = pool.step({2: "inc"})
        assert res[2].obs.startswith("value 2,")
        obs, infos = pool.reset([1, 2, 3])  # lost instances are rebuilt before the reset
        assert all(o.startswith("value 0,") for o in obs) and not any(
            "env_error" in i for i in infos
        )
    finally:
        pool.close()


@pytest.mark.fault("raising env")
def test_error_budget_stops_the_run(counter_interp):
    pool = make_pool(COUNTER_ID, 2, mode="subprocess", max_env_errors=1)
    try:
        pool.reset([0, 1])
        pool.step(["__raise__", "inc"])  # 1 error: within the budget
        pool.reset([0, 1])
        with pytest.raises(
            EnvErrorBudgetExceeded, match=r"2 env calls failed, more than max_env_errors=1"
        ):
            pool.step(["__raise__", "inc"])
    finally:
        pool.close()


def test_rollout_marks_env_errors(counter_interp):
    pool = make_pool(COUNTER_ID, 2, mode="subprocess")

    class BreakFirst:
        name = "break-first"

        def act(self, episodes, envs):
            from arborl.rollout.policies import Decision

            return [Decision(action="__raise__" if ep.index == 0 else env.oracle_action())
                    for ep, env in zip(episodes, envs)]  # fmt: skip

    try:
        out = run_episodes_with_policy(BreakFirst(), pool, [4, 4], RolloutConfig(group_size=1))
    finally:
        pool.close()
    broken, fine = out.episodes
    assert broken.truncation_reason == "env_error" and len(broken.turns) == 1
    assert fine.won and fine.truncation_reason == ""


def test_unknown_mode_and_bad_options():
    with pytest.raises(ValueError, match=r"mode='htp' is unknown. Did you mean 'http'\?"):
        make_pool("arborl/Maze-v0", 2, mode="htp")
    with pytest.raises(ValueError, match="timeout_s=0 must be > 0"):
        make_pool("arborl/Maze-v0", 1, mode="subprocess", timeout_s=0)


@pytest.mark.fault("killed worker")
def test_kill_9_subprocess_worker_mid_episode():
    import os
    import signal

    pool = make_pool("arborl/Maze-v0", 3, mode="subprocess", split="test")  # one env per worker
    ref = EnvPool("arborl/Maze-v0", 3, split="test")
    try:
        pool.reset([5, 6, 7])
        ref.reset([5, 6, 7])
        victim = pool.transport.workers[1].pid
        os.kill(victim, signal.SIGKILL)
        res, done = pool.step(["up", "up", "up"])
        want, _ = ref.step(["up", "up", "up"])
        assert "crashed" in res[1].info["env_error"] and done[1]
        assert res[0] == want[0] and res[2] == want[2]  # the other episodes are untouched
        obs, _ = pool.reset([5, 6, 7])  # the dead worker is restarted before the reset
        assert obs == ref.reset([5, 6, 7])[0] and pool.transport.workers[1].pid != victim
        assert pool.transport.num_restarts == 1 and pool.num_env_errors == 1
    finally:
        pool.close()


def test_importing_envs_loads_no_transport_and_no_heavy_stack():
    # The remote modes are lazy "module:attr" entries: `arborl --help` stays fast.
    code = "import sys, arborl.envs; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())  # fmt: skip
    heavy = {"torch", "ray", "fastapi", "uvicorn", "httpx", "arborl.envs.remote.subproc",
             "arborl.envs.remote.ray_pool", "arborl.envs.remote.http_pool"}  # fmt: skip
    assert loaded & heavy == set()
