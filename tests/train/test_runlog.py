"""Run folders: config.yaml, metrics.jsonl flushed on every log, TensorBoard events and
run.log, and reading metrics back after a kill."""

import logging
from dataclasses import dataclass, field

import pytest
import yaml

from arborl.config import to_dict
from arborl.train.runlog import MetricsLogger, RunDir, read_metrics


@dataclass
class _Trainer:
    total_steps: int = 3
    """Steps."""
    log_keys: list[str] = field(default_factory=lambda: ["loss"])
    """Shown on the bar."""


@dataclass
class _Cfg:
    seed: int = 0
    """Seed."""
    trainer: _Trainer = field(default_factory=_Trainer)
    """Trainer."""


@pytest.fixture
def run(tmp_path):
    run = RunDir.create(tmp_path / "runs", "toy", config=_Cfg(seed=5))
    yield run
    run.close()


def test_create_writes_the_config(run, tmp_path) -> None:
    assert run.path == tmp_path / "runs" / "toy"
    written = yaml.safe_load((run.path / "config.yaml").read_text())
    expected = {"seed": 5, "trainer": {"total_steps": 3, "log_keys": ["loss"]}}
    assert written == to_dict(_Cfg(seed=5)) == expected


def test_create_without_config_or_name(tmp_path) -> None:
    run = RunDir.create(tmp_path, None)
    try:
        assert run.path.parent == tmp_path and run.path.name  # a timestamp
        assert not (run.path / "config.yaml").exists()
    finally:
        run.close()


def test_metrics_are_flushed_after_each_log(run) -> None:
    logger = MetricsLogger(run, total=2, keys=("loss",), disable_bar=True)
    try:
        logger.log(0, {"loss": 1.5, "note": "warmup", "bad": float("nan")}, advance=1)
        first = read_metrics(run.metrics_path)  # read back before close
        assert len(first) == 1
        assert first[0]["step"] == 0 and first[0]["loss"] == 1.5
        assert first[0]["note"] == "warmup" and first[0]["bad"] is None  # non-finite -> null
        assert first[0]["time_s"] >= 0
        logger.log(1, {"loss": 0.75, "reward/mean": 2})
        assert [r["loss"] for r in read_metrics(run.metrics_path)] == [1.5, 0.75]
    finally:
        logger.close()
    assert read_metrics(run.metrics_path)[1]["reward/mean"] == 2.0


def test_tensorboard_events_are_written(run) -> None:
    logger = MetricsLogger(run, disable_bar=True)
    logger.log(0, {"loss": 1.0})
    logger.close()
    events = list((run.path / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_close_without_scalars_opens_no_writer(run) -> None:
    logger = MetricsLogger(run, disable_bar=True)
    logger.log(0, {"note": "text only"})
    logger.close()
    assert run._tb is None and not (run.path / "tb").exists()


def test_run_log_receives_logging_messages(run) -> None:
    logging.getLogger("arborl.train").info("step 3 done: loss=%.2f", 0.5)
    run.close()  # flushes and detaches the file handler
    text = (run.path / "run.log").read_text()
    assert "INFO step 3 done: loss=0.50" in text
    logging.getLogger("arborl").info("after close")
    assert "after close" not in (run.path / "run.log").read_text()


def test_read_metrics_skips_a_torn_last_line(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.5}\n{"step": 2, "lo')
    assert read_metrics(path) == [{"step": 0, "loss": 1.0}, {"step": 1, "loss": 0.5}]


def test_metrics_append_across_loggers(run) -> None:
    # A resumed run opens a new logger on the same folder: earlier steps are kept.
    for step in range(2):
        logger = MetricsLogger(run, disable_bar=True)
        logger.log(step, {"loss": float(step)})
        logger.close()
    assert [r["step"] for r in read_metrics(run.metrics_path)] == [0, 1]
