"""A run whose every episode errored says so (issue 48 req 1): `arborl train` prints "N of
M episodes errored" with the first reason and what to change, exits with 3, and writes
the same into summary.json, run.log and the report's header; a timed-out plain-function
agent still in torch at the end no longer aborts the process (SIGABRT, exit 134) after
the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOY = [
    "env.id=arborl/ToolQA-v0", "rollout.mode=program", "model.name_or_path=tiny-0.1m",
    "sft.enabled=false", "rollout.num_tasks=1", "rollout.group_size=2",
    "rollout.max_new_tokens=4", "eval.num_episodes=1", "trainer.total_steps=1",
    "trainer.progress=false", "trainer.plots=false", "trainer.num_threads=1",
]  # fmt: skip


def _train(tmp_path: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    """`arborl train` in its own process (the exit path is what is tested)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [*TOY, f"trainer.output_dir={tmp_path}", f"trainer.name={name}", *extra]
    return subprocess.run([sys.executable, "-m", "arborl.cli.main", "train", *argv],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip


@pytest.mark.slow  # a whole `arborl train` run in a subprocess (~15 s)
def test_a_run_whose_every_call_is_over_the_context_exits_3_and_says_what_to_change(tmp_path):
    out = _train(tmp_path, "long", "agent_program.fn=tests.e2e._agents_that_fail:overlong")
    assert out.returncode == 3, out.stderr[-2000:]
    assert (
        "errors: 4 of 4 episodes errored (before RL 1 of 1, RL 2 of 2, after RL 1 of 1; "
        in out.stdout
    )
    assert "first error: agent crashed: the agent raised BadRequestError" in out.stdout
    assert "the limit is 1023" in out.stdout
    assert "error: nothing was learned: every episode of the run errored" in out.stderr
    assert "use a model with a longer context, or shorten what the agent sends" in out.stderr
    run = tmp_path / "long"
    failures = json.loads((run / "summary.json").read_text())["failures"]
    assert failures["total_errored"] == failures["total_episodes"] == 4
    assert failures["errored"] == {"before": 1, "rl": 2, "after": 1}
    assert failures["verdict"] == "all_errored" and failures["rows_trained"] == 0
    assert "tokens; the limit is 1023" in failures["first_error"]
    log = (run / "run.log").read_text()
    assert "4 of 4 episodes errored" in log and "nothing was learned" in log
    assert "before RL: 1 of 1 held-out episodes errored (first error: agent crashed" in log
    # the RL step's line names the crash's reason as it names a timeout's
    assert "ended by an env error" in log and "env error agent crashed: the agent raised" in log
    page = (run / "report.html").read_text()
    assert "finished, learned nothing" in page and "4 of 4 episodes errored" in page


@pytest.mark.slow  # a whole `arborl train` run in a subprocess (~15 s)
def test_timed_out_agent_threads_in_torch_do_not_abort_the_process(tmp_path):
    out = _train(tmp_path, "spin", "agent_program.fn=tests.e2e._agents_that_fail:spinning",
                 "agent_program.timeout_s=1", "trainer.report=false")  # fmt: skip
    assert "terminate called" not in out.stderr
    assert out.returncode == 3, out.stderr[-2000:]  # not 134 (SIGABRT), as before
    assert "first error: agent timeout: the agent ran past timeout_s=1" in out.stdout
    assert "raise agent_program.timeout_s" in out.stderr
