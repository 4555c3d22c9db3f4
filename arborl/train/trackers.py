"""Experiment trackers: where `MetricsLogger` sends each scalar besides metrics.jsonl.

`trainer.loggers` names them (default `["tensorboard"]`); each is a small class in the
`TRACKERS` registry built as `cls(run, config_dict)` (`run`: the `RunDir`) with `log(step, scalars)` and
`close()`. Every tracker receives exactly the names and values written to metrics.jsonl,
so a curve in TensorBoard, in Weights & Biases and in `report.html` is the same series.

Weights & Biases runs in offline mode unless `WANDB_MODE` says otherwise: a run never
needs a network or a login, and `wandb sync runs/<name>/wandb/offline-run-*` uploads it
later.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from arborl.registry import Registry

TRACKERS: Registry[type] = Registry("trainer.loggers")
"""`trainer.loggers` entry -> tracker class, built as `cls(run, config_dict)`."""


@TRACKERS.register("tensorboard")
class TensorBoardTracker:
    """TensorBoard event files under `runs/<name>/tb/` (opened on the first scalar)."""

    def __init__(self, run: Any, config: dict[str, Any] | None = None) -> None:
        self.run = run  # RunDir.tb opens the writer (and its thread) on first use

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for k, v in scalars.items():
            self.run.tb.add_scalar(k, v, step)

    def flush(self) -> None:
        if self.run._tb is not None:  # don't open a writer just to flush
            self.run._tb.flush()

    def close(self) -> None:
        self.flush()  # the writer itself is closed with the RunDir


@TRACKERS.register("wandb")
class WandbTracker:
    """A Weights & Biases run in `runs/<name>/wandb/`, offline unless `WANDB_MODE` is set."""

    def __init__(self, run: Any, config: dict[str, Any] | None = None) -> None:
        try:
            import wandb
        except ImportError as e:
            raise RuntimeError(
                "trainer.loggers has 'wandb' but the wandb package is not installed; "
                "`pip install wandb` (it comes with the dev extra) or drop 'wandb' from "
                "trainer.loggers"
            ) from e
        run_dir = Path(run.path)
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "arborl"),
            name=run_dir.name,
            dir=str(run_dir),
            config=config or {},
            mode=os.environ.get("WANDB_MODE", "offline"),
            reinit="finish_previous",
        )

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self._run.log(dict(scalars), step=step)

    def flush(self) -> None:
        """W&B writes in its own process; nothing to flush here."""

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


def check_loggers(names: list[str], prefix: str = "trainer.loggers") -> None:
    """Raise `ValueError` naming the entry if a logger is not in `TRACKERS`."""
    for i, name in enumerate(names):
        if name not in TRACKERS:
            raise ValueError(
                f"{prefix}[{i}]={name!r} is not a known logger; use some of "
                f"{sorted(TRACKERS)} (register more with arborl.train.trackers.TRACKERS)"
            )


def build_trackers(names, run: Any, config: dict[str, Any] | None = None) -> list:
    """One tracker per name, in order, for `run` (a `RunDir`); an unknown name raises
    (`TrainConfig` already ran `check_loggers` on `trainer.loggers`)."""
    return [TRACKERS.get(n)(run, config) for n in names]
