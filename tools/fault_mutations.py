"""The fault suite's mutations: for each scenario of `tests/conftest.py` FAULT_SCENARIOS,
the small edit that removes the protection its tests guard.

`tools/fault_mutate.py` (`make test-faults-mutate`) applies each one, alone, to a throwaway
copy of the tree and runs that scenario's tests against it: they must fail, or the suite
would pass a build without the protection. Each edit is exact: `old` must occur exactly
once in `path`, or the check stops naming the mutation, so a refactor cannot leave one
silently pointing at nothing (tests/faults/test_mutations.py checks it on every
`make test`). When you move or rewrite a protection, update its `old`/`new` here.

A scenario has one mutation, except where it is guarded by independent mechanisms that
must each be caught alone ("abandoned client": the disconnect poll and the cancelled
handler, review 3 #14).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    """One edit that disables one protection."""

    scenario: str
    """The FAULT_SCENARIOS name whose tests must catch it."""
    protection: str
    """The protection removed, in words."""
    path: str
    """The file edited, relative to the repository root."""
    old: str
    """Text that occurs exactly once in `path`."""
    new: str
    """What replaces it."""
    cost_s: float
    """Rough seconds the scenario's tests take on 2 loaded cores (docs/security.md, "What
    we test"); `fault_mutate.py --max-cost` runs only the cheaper ones."""
    timeout_s: int = 600
    """Per-test limit (pytest-timeout): an unprotected build may hang, which then fails."""
    needs: tuple[str, ...] = ()
    """Python modules the tests need; a scenario whose need is missing is skipped, saying so."""


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "kill -9 during a save",
        "a save is a checkpoint only whole: written to .tmp-step-N and renamed after its "
        "manifest, and resume takes only a folder that verifies",
        "arborl/train/checkpoint.py",
        "    for d in reversed(checkpoint_dirs(run_dir)):\n        reason = verify_checkpoint(d)\n",
        "    root = Path(run_dir) / 'checkpoints'  # MUTATION: the newest folder, torn or not\n"
        "    for d in sorted(root.iterdir(), key=lambda p: -int(p.name.rsplit('-', 1)[1])):\n"
        "        reason = None\n",
        cost_s=24,
    ),
    Mutation(
        "kill -9 of the trainer",
        "a resume restores the whole trainer state, the optimizer's moments included",
        "arborl/train/engine.py",
        '        self.opt.load_state_dict(state["optimizer"])\n',
        "        pass  # MUTATION: the optimizer starts afresh on resume\n",
        cost_s=850,
    ),
    Mutation(
        "corrupt newest checkpoint",
        "resume verifies a checkpoint against its manifest (sizes, SHA-256) before using it",
        "arborl/train/checkpoint.py",
        "        reason = verify_checkpoint(d)\n        if reason is None:\n",
        "        reason = None  # MUTATION: no verification\n        if reason is None:\n",
        cost_s=2,
    ),
    Mutation(
        "hanging env",
        "every env call is bounded by the pool's timeout_s",
        "arborl/envs/remote/base.py",
        "            return self.transport.call(calls, self.timeout_s)\n",
        "            return self.transport.call(calls, 3600.0)  # MUTATION: no call timeout\n",
        cost_s=64,
    ),
    Mutation(
        "raising env",
        "a failed env call is counted, against env.max_env_errors",
        "arborl/envs/remote/base.py",
        "        self.num_env_errors += 1\n",
        "        self.num_env_errors += 0  # MUTATION: failures are not counted\n",
        cost_s=67,
    ),
    Mutation(
        "NaN rewards",
        "the trainer drops every episode with a reward row that is not finite "
        "(train.rows.nonfinite_reward_episodes)",
        "arborl/train/rows.py",
        "    for what, r in checks:\n",
        "    for what, r in checks[:0]:  # MUTATION: nothing is checked\n",
        cost_s=4,
    ),
    Mutation(
        "abandoned client",
        "run_request polls for the client's disconnect and stops the request's work",
        "arborl/serving/cancel.py",
        "            if not scope.gone.is_set() and await request.is_disconnected():\n"
        "                scope.gone.set()\n",
        "            pass  # MUTATION: the disconnect is never polled\n",
        cost_s=20,
    ),
    Mutation(
        "abandoned client",
        "a cancelled handler (server shutdown, a framework that cancels on disconnect) "
        "stops its request's work",
        "arborl/serving/cancel.py",
        "        scope.gone.set()\n        raise\n",
        "        raise  # MUTATION: the worker thread is not told\n",
        cost_s=20,
    ),
    Mutation(
        "duplicate run",
        "a trainer takes an exclusive flock on its run folder's .lock",
        "arborl/train/runlog.py",
        "    try:\n        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\n",
        "    try:\n        pass  # MUTATION: no lock\n",
        cost_s=75,
    ),
    Mutation(
        "killed worker",
        "a dead env worker is restarted before its next call (and a dead Ray rollout "
        "worker replaced)",
        "arborl/envs/remote/subproc.py",
        "            if w is not None and w.alive():\n                continue\n",
        "            if w is not None:  # MUTATION: a dead worker is never restarted\n"
        "                continue\n",
        cost_s=165,
    ),
    Mutation(
        "node loss",
        "the replacement of a lost node's worker is placed on a live node",
        "arborl/distributed/fleet.py",
        "self.placement.rollout_worker(index, self.policy_path, node_lost=node_lost)",
        "self.placement.rollout_worker(index, self.policy_path, node_lost=False)  # MUTATION",
        cost_s=120,
        timeout_s=900,
        needs=("ray",),
    ),
    Mutation(
        "async agent ignores its deadline",
        "the parent stops waiting for an agent program at timeout_s",
        "arborl/rollout/agent_run.py",
        '    if not done.wait(timeout_s) or "finished" not in box:\n',
        '    if not done.wait() or "finished" not in box:  # MUTATION: waits for the agent\n',
        cost_s=15,
        timeout_s=90,
    ),
    Mutation(
        "agent leaves children",
        "a command agent's process group is killed whenever its main process ends",
        "arborl/rollout/agent_run.py",
        "            os.killpg(proc.pid, signal.SIGKILL)\n",
        "            if not exited:  # MUTATION: the group is killed at the deadline only\n"
        "                os.killpg(proc.pid, signal.SIGKILL)\n",
        cost_s=2,
        timeout_s=120,
    ),
    Mutation(
        "chatty agent",
        "only a bounded tail of a command agent's stdout and stderr is kept",
        "arborl/rollout/agent_run.py",
        "        while self.size - len(self.chunks[0]) >= self.cap:\n",
        "        while False:  # MUTATION: everything is kept\n",
        cost_s=4,
    ),
    Mutation(
        "out-of-range reward",
        "check_reward refuses a reward past float, not finite or past 1e6 "
        "(arborl.data.reward_check)",
        "arborl/data/reward_check.py",
        "    problem = reward_problem(value)\n",
        "    problem = None  # MUTATION: every reward accepted\n",
        cost_s=60,
    ),
    Mutation(
        "SIGTERM/SIGINT stop",
        "the trainer turns SIGTERM and SIGINT into a stop request (StopSignals)",
        "arborl/train/stop.py",
        "            self._before = {s: signal.signal(s, self._handle) for s in SIGNALS}\n",
        "            self._before = {}  # MUTATION: Python's default handlers\n",
        cost_s=330,
    ),
    Mutation(
        "concurrent compare",
        "a compare takes an exclusive flock on its grid folder's .compare.lock",
        "arborl/grid/guard.py",
        "    f = take_lock(out / LOCK_FILE, busy)\n",
        '    f = open(out / LOCK_FILE, "a+")  # MUTATION: no lock\n',
        cost_s=5,
    ),
    Mutation(
        "failed request",
        "a call that leaves its in-flight slot by an exception releases it (served.Slot)",
        "arborl/generation/served.py",
        "            self.recorder.end(self.ticket, None)  # a failed call is not recorded\n",
        "            pass  # MUTATION: a failed call keeps its slot\n",
        cost_s=6,
    ),
)
