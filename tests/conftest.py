"""Shared test set-up: tests run on a few shared CPU cores, so torch uses one thread."""

import json
import time
from pathlib import Path

import httpx
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def wait_for_health():
    """`wait(proc, url)`: poll `url/health` until 200; fail if `proc` dies or 180 s pass
    (a server imports torch and builds its model first: ~10 s quiet, a minute at load 6)."""

    def wait(proc, url: str, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            err = proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else ""
            assert proc.poll() is None, f"server exited: {err}"
            assert time.monotonic() < deadline, f"{url} did not come up in {timeout_s:.0f} s"
            time.sleep(0.2)

    return wait


@pytest.fixture
def starts(monkeypatch):
    """The pids of every env worker process (`arborl.envs.remote.subproc`) started from here on."""
    from arborl.envs.remote import subproc

    pids: list[int] = []
    real = subproc.subprocess.Popen

    def popen(*args, **kwargs):
        proc = real(*args, **kwargs)
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(subproc.subprocess, "Popen", popen)
    return pids


# --- the standing fault suite ------------------------------------------------------------
# Tests marked `@pytest.mark.fault("<scenario>", ...)` are the fault scenarios of the
# reliability reviews (../shared/research/reliability-review-2.md), wherever the code they
# test lives; `pytest -m fault` runs just them, and every run that includes some ends with
# "fault suite: N/M scenarios held". docs/security.md, "What we test", lists them. Each
# text names the protection its tests guard; tools/fault_mutations.py holds the edit that
# removes it, and `make test-faults-mutate` checks the tests then fail.
FAULT_SCENARIOS = {
    "kill -9 during a save": "a torn checkpoint is never resumed from; resume is bit-exact "
    "(protection: a save is written to .tmp-step-N and renamed after its manifest)",
    "kill -9 of the trainer": "trainer.resume=auto continues bit-exactly, no step twice "
    "(protection: a checkpoint holds the whole trainer state, optimizer and RNGs included)",
    "corrupt newest checkpoint": "skipped with the reason, the older one resumed; no code run "
    "(protection: resume verifies the manifest's sizes and SHA-256; weights_only loads)",
    "hanging env": "the call times out, only its episode ends, counted "
    "(protection: every env call is bounded by the pool's timeout_s)",
    "raising env": "only its episode ends, counted, never trained on; a budget stops the run "
    "(protection: failed calls are counted against env.max_env_errors)",
    "NaN rewards": "the episode is an env error, never trained on; metrics and report readable "
    "(protection: train.rows.nonfinite_reward_episodes)",
    "abandoned client": "a client that hangs up or idles frees the server for the next one "
    "(protection: serving.cancel.run_request's disconnect poll and its cancelled-handler "
    "path, each alone; the per-request deadline)",
    "duplicate run": "a second trainer on one run folder is refused; a killed one leaves no "
    "lock (protection: an exclusive flock on the run folder's .lock)",
    "killed worker": "a kill -9'd worker is replaced and only its own work is redone "
    "(protection: a dead worker is restarted before its next call)",
    "node loss": "a lost Ray node's workers are re-placed, its share re-run once and whole "
    "(protection: the replacement goes to a live node)",
    "async agent ignores its deadline": "the parent stops waiting at timeout_s (daemon "
    "thread, own loop, cancelled from outside): a counted timeout; the run never hangs",
    "agent leaves children": "a command agent's process group is killed when its main "
    "process exits: no child outlives the episode, a child's open stdout is no timeout",
    "chatty agent": "a command agent's output is read as it comes; only bounded tails kept",
    "out-of-range reward": "one check (data.reward_check) at every entry: a reward past "
    "float, not finite or past 1e6 is a counted env error, in training and evaluation",
    "SIGTERM/SIGINT stop": "the step in progress finishes and is saved, run.log says where "
    "it stopped, workers exit with it; resume=auto continues bit-exactly (protection: "
    "train.stop.StopSignals' handlers)",
    "concurrent compare": "a second compare on one --out is refused naming the first's pid; "
    "the first's results are left alone (protection: a flock on <out>/.compare.lock)",
    "failed request": "a call that fails after admission frees its in-flight slot; no 503 "
    "after (protection: the slot is a context manager, generation.served.Slot)",
}
_fault_outcomes: dict[str, tuple[tuple[str, ...], str]] = {}


@pytest.fixture
def fault_scenarios() -> dict[str, str]:
    """The fault suite's scenarios: name -> what must hold."""
    return dict(FAULT_SCENARIOS)


# --- the order files run in --------------------------------------------------------------
# `make test` runs the suite on pytest-xdist workers, a file per worker at a time, files in
# collection order (`--dist loadfile --no-loadscope-reorder`). Files run longest first
# (tests/durations.json, seconds per file, written by `tools/test_durations.py` from a run's
# JUnit XML), so no long file starts last on one worker while the other sits idle; files
# not in the table keep their order after the known ones.
DURATIONS = Path(__file__).parent / "durations.json"


def _longest_files_first(items: list) -> None:
    try:
        weight = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)
    items.sort(key=lambda it: (-weight.get(f := it.nodeid.split("::")[0], 0.0), first[f]))


def pytest_collection_modifyitems(config, items):
    _longest_files_first(items)
    for item in items:
        mark = item.get_closest_marker("fault")
        if mark is None:
            continue
        unknown = [s for s in mark.args if s not in FAULT_SCENARIOS]
        if not mark.args or unknown:
            raise pytest.UsageError(
                f"{item.nodeid}: fault scenario(s) {unknown or '(none)'} are not in "
                f"tests/conftest.py FAULT_SCENARIOS {sorted(FAULT_SCENARIOS)}; use one or add it"
            )
        # user_properties travel with the reports, also from pytest-xdist workers
        item.user_properties.append(("fault_scenarios", tuple(mark.args)))


def pytest_runtest_logreport(report):
    scenarios = dict(report.user_properties).get("fault_scenarios")
    if not scenarios:
        return
    _, before = _fault_outcomes.get(report.nodeid, (scenarios, ""))
    if report.failed:
        outcome = "failed"
    elif report.skipped:
        outcome = before or "skipped"
    elif report.when == "call":
        outcome = before or "passed"
    else:
        outcome = before
    _fault_outcomes[report.nodeid] = (tuple(scenarios), outcome)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _fault_outcomes or hasattr(config, "workerinput"):
        return
    by_scenario: dict[str, list[str]] = {s: [] for s in FAULT_SCENARIOS}
    for scenarios, outcome in _fault_outcomes.values():
        for s in scenarios:
            by_scenario[s].append(outcome)

    def verdict(outcomes: list[str]) -> str:
        if "failed" in outcomes:
            return "FAILED"
        return "held" if "passed" in outcomes else "not run"

    verdicts = {s: verdict(o) for s, o in by_scenario.items()}
    held = sum(v == "held" for v in verdicts.values())
    tr = terminalreporter
    tr.write_sep("=", f"fault suite: {held}/{len(FAULT_SCENARIOS)} scenarios held")
    for s, v in verdicts.items():
        n, ran = sum(o == "passed" for o in by_scenario[s]), len(by_scenario[s])
        tr.write_line(f"  {v:8} {s:26} {f'{n}/{ran} tests passed' if ran else ''}".rstrip())
