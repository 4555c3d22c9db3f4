"""`trainer.loggers`: TensorBoard and Weights & Biases (offline) get metrics.jsonl's names."""

import json
import struct
import time

import pytest

from arborl.config import ConfigError
from arborl.train.config import load_train_config
from arborl.train.runlog import MetricsLogger, RunDir, read_metrics
from arborl.train.trackers import TRACKERS


def test_unknown_logger_is_a_config_error_naming_the_entry() -> None:
    with pytest.raises(ConfigError, match=r"trainer.loggers\[1\]='mlflow'.*'tensorboard', 'wandb'"):
        load_train_config(["trainer.loggers=[tensorboard, mlflow]"])
    assert load_train_config([]).trainer.loggers == ["tensorboard"]


def test_a_registered_tracker_gets_the_same_names_and_values(tmp_path) -> None:
    seen = []

    class Recorder:
        def __init__(self, run, config):
            self.config = config

        def log(self, step, scalars):
            seen.append((step, scalars))

        def close(self):
            seen.append("closed")

    TRACKERS.register("recorder", Recorder)
    run = RunDir(tmp_path / "r")
    try:
        logger = MetricsLogger(run, disable_bar=True, loggers=["recorder"], config={"a": 1})
        logger.log(3, {"train/success": 0.5, "phase": "rl", "bad": float("inf")})
        logger.close()
    finally:
        run.close()
        TRACKERS.unregister("recorder")
    assert seen == [(3, {"train/success": 0.5}), "closed"]  # strings and non-finite skipped
    assert read_metrics(run.metrics_path)[0]["train/success"] == 0.5
    assert not (tmp_path / "r" / "tb").exists()  # tensorboard not asked for


def wandb_records(path) -> list[tuple[str, dict]]:
    """(kind, fields) of the history and run-config records of an offline `.wandb` file:
    a 7-byte W&B header, then LevelDB-log chunks (crc u32, length u16, type u8: 1 full,
    2 first, 3 middle, 4 last) in 32 KiB blocks, each payload a `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2

    data, pos, part, out = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):  # a chunk still being written
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        part = chunk if kind in (1, 2) else part + chunk
        if kind not in (1, 4):
            continue
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(part)
        if rec.WhichOneof("record_type") == "history":
            items = rec.history.item  # a "/" name may come as nested_key ["train", "success"]
            out.append(
                (
                    "history",
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items},
                )
            )
        elif rec.WhichOneof("record_type") == "run":
            cfg = {u.key: json.loads(u.value_json) for u in rec.run.config.update}
            out.append(("config", cfg))
        elif rec.WhichOneof("record_type") == "exit":
            out.append(("exit", {}))
    return out


@pytest.mark.slow
def test_wandb_offline_run_has_the_metrics_jsonl_names(tmp_path, monkeypatch) -> None:
    try:
        import wandb  # noqa: F401
    except ImportError:
        pytest.fail("wandb is missing: `pip install -e .[dev]` (it is in the dev extra)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = RunDir(tmp_path / "w")
    try:
        logger = MetricsLogger(
            run, disable_bar=True, loggers=["tensorboard", "wandb"], config={"algo": {"lr": 0.1}}
        )
        logger.log(1, {"train/success": 0.25, "actor/kl": 0.01})
        logger.log(2, {"train/success": 0.75, "actor/kl": 0.02})
        logger.close()
    finally:
        run.close()
    assert list((run.path / "tb").glob("events.out.tfevents.*"))
    (offline,) = (run.path / "wandb").glob("offline-run-*/run-*.wandb")
    # wandb's own process may still be writing the file when finish() returns
    deadline = time.monotonic() + 60
    while ("exit", {}) not in (recs := wandb_records(offline)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ("config", {"_wandb": {}, "algo": {"lr": 0.1}}) in recs
    history = [{k: v for k, v in r.items() if not k.startswith("_") or k == "_step"}
               for kind, r in recs if kind == "history"]  # fmt: skip
    assert history == [
        {"train/success": 0.25, "actor/kl": 0.01, "_step": 1},
        {"train/success": 0.75, "actor/kl": 0.02, "_step": 2},
    ]
    jsonl = [{k: v for k, v in r.items() if k != "time_s"} for r in read_metrics(run.metrics_path)]
    assert [{"_step" if k == "step" else k: v for k, v in r.items()} for r in jsonl] == history
