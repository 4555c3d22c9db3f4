"""Stopping a run cleanly on SIGTERM or SIGINT (a job scheduler's stop, a `kill`, Ctrl-C).

Python's default is to die at once on SIGTERM (exit 143, nothing in run.log, every step
since the last checkpoint lost) and to raise `KeyboardInterrupt` wherever Ctrl-C lands.
While `RLTrainer.fit` runs, `StopSignals` turns the first SIGTERM or SIGINT into a request
instead: the RL step in progress *finishes* (rollout, update, its periodic evaluation and
metrics, exactly as in an uninterrupted run), then the trainer writes a checkpoint at that
step, logs "stopped at step N; resume with trainer.resume=auto" and raises
`TrainingStopped`; `arborl train` exits with `TrainingStopped.exit_code`, 128 + the signal
(143 for SIGTERM, 130 for SIGINT: the shell's code for "ended by that signal"). Finishing the
step, rather than dropping it, makes the stop point a step boundary like any periodic save,
so `trainer.resume=auto` continues bit-exactly. A signal during the SFT warm start or the
first evaluation is honoured when they end, before RL step 1 (a checkpoint at step 0).

A second SIGTERM or SIGINT while stopping means "now": it is logged, the handlers go back
to Python's defaults and `SystemExit(128 + signal)` unwinds the trainer, whose `finally`
still closes the env workers and the Ray cluster; the steps since the last checkpoint are
lost, as after a kill. Env workers ignore SIGINT (`arborl.envs.remote.stdio_worker`), so a
Ctrl-C sent to the whole terminal process group reaches the trainer only.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

log = logging.getLogger("arborl")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals that ask a run to stop."""


class TrainingStopped(Exception):
    """The run stopped on a signal after checkpointing step `step` (see the module doc)."""

    def __init__(self, signum: int, step: int) -> None:
        self.signum, self.step = signum, step
        super().__init__(f"stopped at step {step}; resume with trainer.resume=auto")

    @property
    def exit_code(self) -> int:
        """128 + the signal: 143 for SIGTERM, 130 for SIGINT."""
        return 128 + self.signum


class StopSignals:
    """While entered (in the main thread; elsewhere a no-op), the first SIGTERM or SIGINT
    sets `signum` and a second one exits at once; leaving restores the old handlers."""

    def __init__(self, describe_loss: Callable[[], str] = lambda: "") -> None:
        """`describe_loss()`: what an immediate exit loses, for the log line."""
        self.signum: int | None = None
        self._describe_loss = describe_loss
        self._before: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._before = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def arm(self) -> None:
        """Take the signals back after code that set handlers of its own while entered:
        `ray.init` installs a C-level SIGTERM handler that aborts the driver (exit -6)."""
        for s in self._before:
            signal.signal(s, self._handle)

    def __exit__(self, *exc) -> None:
        for s, handler in self._before.items():
            # None: a handler set outside Python (e.g. by Ray), which cannot be put back
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        self._before = {}

    def _handle(self, signum: int, _frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            log.warning(
                "%s received: the RL step in progress finishes, then a checkpoint is written "
                "and the run stops (send %s again to exit at once, without a checkpoint)",
                name, name,
            )  # fmt: skip
            return
        log.warning(
            "second %s while stopping: exiting at once; %s", name,
            self._describe_loss() or "steps since the last checkpoint are lost",
        )  # fmt: skip
        for s in SIGNALS:  # a third one is not caught at all
            signal.signal(s, signal.SIG_DFL if s == signal.SIGTERM else signal.default_int_handler)
        raise SystemExit(128 + signum)
