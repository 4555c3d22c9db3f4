"""Where agent programs run and what their deadline guarantees (issue 50 #2, #6, #9): the
parent stops waiting at `timeout_s` whatever an `async` program does; a command's process
group dies with its episode, a child holding its stdout does not make a finished episode
a timeout, and its output costs the trainer a bounded tail."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from arborl.rollout.agent_run import STDERR_TAIL, STDOUT_TAIL, AgentFailed, run_command, run_fn

CMD = [sys.executable, str(Path(__file__).with_name("_cmd_faults.py"))]
ENV = {**os.environ, "ARBORL_TASK": "{}", "OPENAI_BASE_URL": "-", "OPENAI_API_KEY": "-"}


def _within(call, limit_s: float):
    """`call()`'s outcome ("ok", value) or ("error", exception), and its time; fails if it
    has not returned within `limit_s` (the old runner never returned: no hang here)."""
    box: dict = {}
    done = threading.Event()

    def target():
        t0 = time.monotonic()
        try:
            box["out"] = ("ok", call())
        except BaseException as e:  # noqa: BLE001
            box["out"] = ("error", e)
        box["s"] = time.monotonic() - t0
        done.set()

    threading.Thread(target=target, daemon=True).start()
    assert done.wait(limit_s), f"the runner did not return within {limit_s} s"
    return box["out"], box["s"]


def _gone(pid: int, wait_s: float = 10.0) -> bool:
    """Has `pid` ended (or is it a zombie waiting for PID 1 to reap it)?"""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.fault("async agent ignores its deadline")
def test_an_async_agent_that_swallows_the_cancel_ends_at_its_deadline():
    cancels = []

    async def deaf(*_):
        while True:
            try:
                await asyncio.sleep(3600)
            except BaseException:  # noqa: BLE001 - swallows the cancel, as retry loops do
                cancels.append(time.monotonic())

    (kind, err), took = _within(lambda: run_fn(deaf, (), 1.0), 30)
    assert kind == "error" and isinstance(err, AgentFailed) and err.reason == "timeout"
    assert "timeout_s=1" in err.message
    assert took < 10  # 1 s deadline, generous slack for a loaded machine
    deadline = time.monotonic() + 10
    while not cancels and time.monotonic() < deadline:
        time.sleep(0.02)
    assert cancels, "the task was never cancelled"


@pytest.mark.fault("async agent ignores its deadline")
def test_an_async_agent_that_blocks_its_loop_ends_at_its_deadline():
    slept = threading.Event()

    async def blocking(*_):
        time.sleep(20)  # a sync client inside a coroutine: the loop cannot cancel it
        slept.set()
        return 1.0

    (kind, err), took = _within(lambda: run_fn(blocking, (), 1.0), 60)
    assert kind == "error" and err.reason == "timeout", (kind, err)
    assert not slept.is_set()  # the episode ended before the blocking code returned
    assert took < 10


def test_a_plain_or_async_agent_that_returns_in_time_gives_its_value():
    async def fine(x):
        await asyncio.sleep(0.01)
        return x

    assert run_fn(fine, (3,), 10.0) == 3
    assert run_fn(lambda x: x + 1, (3,), 10.0) == 4
    with pytest.raises(AgentFailed, match="ZeroDivisionError"):
        run_fn(lambda: 1 / 0, (), 10.0)


@pytest.mark.fault("agent leaves children")
@pytest.mark.parametrize("mode", ["orphan", "holds_stdout"])
def test_a_command_agents_children_die_with_its_episode(mode):
    (kind, out), took = _within(lambda: run_command([*CMD, mode], ENV, 30.0), 60)
    assert kind == "ok", out  # finished, not a timeout: the child's pipe does not count
    assert out["reward"] == 1.0 and took < 20  # the old runner waited for EOF: 30 s
    assert _gone(out["child"]), f"the agent's child {out['child']} outlived its episode"


@pytest.mark.fault("agent leaves children")
def test_a_child_that_leaves_the_group_does_not_make_the_episode_a_timeout():
    (kind, out), took = _within(lambda: run_command([*CMD, "setsid_holds_stdout"], ENV, 30.0), 60)
    try:
        assert kind == "ok" and out["reward"] == 1.0 and took < 20, (kind, out, took)
    finally:  # it escaped the group kill (the program's doing): ours to clean up
        if kind == "ok" and out["child"]:
            os.kill(out["child"], 9)


def test_a_command_that_runs_past_its_deadline_is_killed_whole():
    (kind, err), took = _within(lambda: run_command(["sleep", "30"], ENV, 1.0), 30)
    assert kind == "error" and err.reason == "timeout" and took < 10


def _peak(call):
    tracemalloc.start()
    try:
        out = call()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.fault("chatty agent")
@pytest.mark.parametrize("mode", ["stderr_50mb", "stdout_50mb"])
def test_a_command_agents_output_costs_a_bounded_tail(mode):
    out, peak = _peak(lambda: run_command([*CMD, mode], ENV, 120.0))
    assert out == {"reward": 1.0, "child": None}
    # 50 MB went through; what was kept is the tails (1 MiB + 64 KiB) and a read buffer
    assert peak < 3 * (STDOUT_TAIL + STDERR_TAIL), f"{peak / 2**20:.1f} MiB held"


@pytest.mark.fault("chatty agent")
def test_a_crash_after_much_stderr_gives_its_last_line_within_the_bound():
    (err, peak) = _peak(lambda: pytest.raises(AgentFailed, run_command,
                                              [*CMD, "crash_after_50mb"], ENV, 120.0))  # fmt: skip
    assert err.value.reason == "crashed"
    assert "exited with 4: boom: the tool broke" in err.value.message
    assert peak < 3 * (STDOUT_TAIL + STDERR_TAIL)


def test_a_result_line_past_the_kept_tail_is_no_reward_naming_the_bound():
    with pytest.raises(AgentFailed, match=f"over {STDOUT_TAIL} bytes") as err:
        run_command([*CMD, "long_line"], ENV, 60.0)
    assert err.value.reason == "no_reward"
