"""`arborl compare --jobs N` (arborl.grid.jobs): cells run as child processes, N
at a time, each RL cell after its seed's SFT start, with the numbers of --jobs 1; a cell
that crashes leaves the others finished, and one that diverges is "aborted" as in-process.

Real runs at toy size (tiny-0.1m, 1-2 RL steps, 4 held-out episodes): a child spends
most of its ~8 CPU s importing torch, so each test runs at most three.
"""

import json
import os

import pytest

from arborl.cli.main import main
from arborl.config import from_dict
from arborl.grid.compare import CompareConfig, cell_status, plan_grid, run_grid, warn_threads
from arborl.train.config import load_train_config

TOY = [
    "rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=3",
    "eval.num_episodes=4", "eval.every=0", "trainer.total_steps=1", "trainer.progress=false",
    "trainer.plots=false", "trainer.report=false", "trainer.loggers=[]",
    "trainer.save_trajectories=0",
]  # fmt: skip
SFT = ["sft.steps=2", "sft.num_demos=2"]


def _grid(out, **keys) -> CompareConfig:
    data = {"base": TOY, "sft": SFT, "seeds": [0], "out": str(out), **keys}
    return from_dict(CompareConfig, data, prefix="compare.")


def _numbers(out) -> dict:
    """comparison.json with its folder named OUT and wall times left out: what a rerun of
    the same grid on this machine must reproduce."""
    doc = json.loads((out / "comparison.json").read_text().replace(str(out), "OUT"))
    for run in doc["runs"]:
        del run["wall_s"]
    return doc


def _actions(path) -> list[tuple[str, list[str]]]:
    """(task, actions) of each episode of an `eval_episodes` file (trajectory ids carry a
    random prefix: they only label rows)."""
    episodes = [json.loads(x) for x in path.read_text().splitlines()]
    return [(e["task_id"], [s["action"] for s in e["steps"]]) for e in episodes]


def _span(folder) -> tuple[int, int]:
    """When a cell's run started (its marker written) and ended (summary.json written)."""
    start, end = folder / "compare_cell.json", folder / "summary.json"
    return start.stat().st_mtime_ns, end.stat().st_mtime_ns


@pytest.mark.slow
def test_two_jobs_overlap_wait_for_the_start_and_give_the_numbers_of_one(tmp_path):
    arms = {"grpo": ["algo=grpo"], "gigpo": ["algo=gigpo"]}
    lines = []
    result = run_grid(_grid(tmp_path / "j2", arms=arms), echo=lines.append, jobs=2)
    j2 = tmp_path / "j2"
    assert [c["status"] for c in result["cells"]] == ["new", "new", "new"]
    sft, grpo, gigpo = (_span(j2 / name) for name in ("sft-s0", "grpo-s0", "gigpo-s0"))
    # the RL runs started after their start was written, and ran at the same time
    assert sft[1] < grpo[0] and sft[1] < gigpo[0]
    assert grpo[0] < gigpo[1] and gigpo[0] < grpo[1]
    # the parent prints a line per start and per end; the runs' output is in their logs
    events = [x.split(" ")[:2] for x in lines if x.startswith("[")]
    names = ("[sft-s0]", "[grpo-s0]", "[gigpo-s0]")
    assert sorted(events) == sorted([n, w] for n in names for w in ("new:", "finished"))
    assert events[:2] == [["[sft-s0]", "new:"], ["[sft-s0]", "finished"]]
    assert all((j2 / name / "compare.log").exists() for name in ("sft-s0", "grpo-s0"))
    # the same grid in this process, one cell after another: the same numbers and weights
    run_grid(_grid(tmp_path / "j1", arms=arms), echo=lambda _: None)
    assert _numbers(j2) == _numbers(tmp_path / "j1")
    policy = "sft-s0/checkpoints/sft/policy/model.safetensors"
    assert (j2 / policy).read_bytes() == (tmp_path / "j1" / policy).read_bytes()
    for run in ("grpo-s0", "gigpo-s0"):  # the same held-out episodes, action for action
        episodes = f"{run}/eval_episodes/step-00000.jsonl"
        assert _actions(j2 / episodes) == _actions(tmp_path / "j1" / episodes)


@pytest.mark.slow
def test_a_crashed_cell_leaves_the_others_finished_and_the_command_fails(tmp_path, capsys):
    out = tmp_path / "grid"
    argv = [
        "compare", *TOY, "--start", "tiny-0.1m", "--seeds", "0", "--out", str(out),
        "--arm", "ok", "algo=grpo",
        # lr 1e30 blows the weights up at the first update: NaN loss at the second step
        "--arm", "diverged", "algo.lr=1e30", "algo.warmup_steps=0", "algo.entropy_coef=1",
        "algo.drop_zero_adv=false", "trainer.max_bad_steps=1", "trainer.total_steps=2",
        # passes the config checks (rm_model is set), fails when the run loads it
        "--arm", "broken", "reward.sources={env: 1.0, rm: 1.0}", "reward.rm_model=/no/rm",
        "--jobs", "2",
    ]  # fmt: skip
    assert main(argv) == 1
    printed = capsys.readouterr()
    assert f"error: cell broken-s0 failed, see {out / 'broken-s0' / 'compare.log'}" in printed.err
    assert "FileNotFoundError: /no/rm" in (out / "broken-s0" / "compare.log").read_text()
    assert "[diverged-s0] aborted: 1 updates had a NaN/inf loss" in printed.out
    assert "[broken-s0] failed (exit status 1)" in printed.out
    doc = json.loads((out / "comparison.json").read_text())
    assert [c["status"] for c in doc["cells"]] == ["new", "aborted", "failed"]
    # the finished run and the aborted one are compared; the crashed one is left out
    assert [(r["run"], r["finished"]) for r in doc["runs"]] == [
        ("ok-s0", True),
        ("diverged-s0", False),
    ]
    assert (out / "ok-s0" / "summary.json").exists()
    # the next call keeps the finished run and reruns the crashed one
    cfg = from_dict(CompareConfig, doc["grid"])
    ok, _, broken = plan_grid(cfg)
    assert (cell_status(cfg, ok), cell_status(cfg, broken)) == ("done", "rerun")


@pytest.mark.slow
def test_the_rl_cells_of_a_failed_start_are_not_run(tmp_path):
    lines = []
    grid = _grid(tmp_path, arms={"grpo": []}, sft=[*SFT, "sft.demos=/no/demos.jsonl"])
    result = run_grid(grid, echo=lines.append, jobs=2)
    assert [c["status"] for c in result["cells"]] == ["failed", "skipped"]
    assert "[grpo-s0] skipped: its SFT start sft-s0 failed" in lines
    assert not (tmp_path / "grpo-s0").exists() and result["runs"] == []
    assert "/no/demos.jsonl" in (tmp_path / "sft-s0" / "compare.log").read_text()


def test_a_warning_when_the_jobs_ask_for_more_threads_than_there_are_cores():
    cores = len(os.sched_getaffinity(0))
    one = [load_train_config(["trainer.num_threads=1"])]
    torch_default = [load_train_config(["trainer.num_threads=null"])]
    lines = []
    warn_threads(one, 1, lines.append)
    warn_threads(one, cores, lines.append)
    assert lines == []
    warn_threads(one, cores + 1, lines.append)
    warn_threads(torch_default, 2, lines.append)
    assert len(lines) == 2 and all("trainer.num_threads=1" in x for x in lines)


def test_jobs_is_a_positive_count(capsys):
    with pytest.raises(SystemExit) as e:
        main(["compare", "--jobs", "0"])
    assert e.value.code == 2 and "--jobs: 0: give 1 or more" in capsys.readouterr().err


PARENT = """
import subprocess, sys
from pathlib import Path
from arborl.grid import jobs as cj

def launch(job):
    job.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(sys.argv[1]).write_text(str(child.pid))
    return child

cj.launch = launch
job = cj.Job(name="a", kind="rl", folder=Path(sys.argv[2]), start=lambda: [])
cj.run_jobs([job], max_jobs=1, echo=print)
"""


def test_a_sigterm_to_the_parent_stops_its_children(tmp_path):
    """`kill` of `arborl compare --jobs N` must not leave its runs going on: Python's
    default SIGTERM dies without clean-up, so `run_jobs` turns it into an exit that
    terminates and waits for the children."""
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file), str(tmp_path)])
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert parent.poll() is None and time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):  # terminated and reaped by the parent
        os.kill(child, 0)


MIDDLE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[2]])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(120)
"""
CHILD = """
import os, time
from arborl.grid.jobs import die_with_parent, sigterm_as_exit
die_with_parent(os.getppid())
with sigterm_as_exit():
    time.sleep(120)
"""


def test_a_child_run_ends_when_its_parent_is_killed_outright(tmp_path):
    """SIGKILL cannot be caught, so the parent cannot stop its children then: each child
    asks the kernel for a SIGTERM when its parent dies (`die_with_parent`)."""
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", MIDDLE, str(pid_file), CHILD])
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    child = int(pid_file.read_text())
    time.sleep(3)  # the child has imported arborl and made its request
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while _alive(child):
        assert time.monotonic() < deadline, "the child outlived its killed parent"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    """A parent killed before its child asked for the signal: the child's parent is no
    longer the pid it was given (`PARENT_ENV`), and it exits instead of running on."""
    import subprocess
    import sys

    code = "from arborl.grid.jobs import die_with_parent; die_with_parent(1)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 128 + 15
