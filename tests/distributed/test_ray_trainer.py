"""`arborl train trainer.engine=ray` end to end on a real local Ray instance.

Real actors, a real gloo group of 2 train ranks, real rollout workers: a rollout worker
SIGKILLed mid-run is replaced by the controller and the run finishes; the final policy is
a plain HF directory that `arborl eval` loads; a sharded checkpoint resumes on another
number of ranks; colocated placement and one-step-off rollout run and log staleness.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
import torch
from safetensors.torch import load_file

from arborl.cli.main import main
from arborl.distributed.checkpoint import export_checkpoint
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer
from arborl.train.runlog import read_metrics

TOY = [
    "model.name_or_path=tiny-0.1m",
    "rollout.num_tasks=2",
    "rollout.group_size=2",
    "rollout.max_turns=3",
    "eval.num_episodes=4",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.save_trajectories=1",
    "reward.sources={env: 1.0, invalid_action: 0.5}",
    "algo.drop_zero_adv=false",
    "trainer.engine=ray",
    "ray.cpus_per_worker=0.25",
]


def _cfg(tmp_path, name, *extra):
    return load_train_config(
        [*TOY, f"trainer.output_dir={tmp_path}", f"trainer.name={name}", *extra]
    )


def _rl_records(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if "train/success" in r]


def _kill_worker_after_step_1(trainer):
    if trainer.step != 0:  # called at the end of rl_step, before the step counter moves
        return
    handle = trainer.engine.fleet.group.handles[0]
    import ray

    pid = ray.get(handle.pid.remote())
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # the process is gone before the next call reaches it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _serve_answers(policy_dir, wait_for_health):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "arborl.cli.main", "serve", str(policy_dir), "--port", str(port)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(proc, url)
        body = {"model": str(policy_dir), "prompt": "#", "max_tokens": 2, "temperature": 0}
        resp = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] <= 2
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.fault("killed worker")
@pytest.mark.slow
def test_killed_rollout_worker_is_replaced_and_the_run_finishes(
    ray_instance, tmp_path, capsys, wait_for_health
):
    # ppo with a KL term: the critic and the reference are sharded and dispatched too.
    cfg = _cfg(
        tmp_path, "fault", "algo=ppo", "algo.kl_coef=0.05", "sft.steps=3", "sft.num_demos=2",
        "trainer.total_steps=3", "ray.num_train_ranks=2", "ray.num_rollout_workers=2",
        "eval.save_episodes=3",
    )  # fmt: skip
    trainer = RLTrainer(cfg)
    assert type(trainer.engine).__name__ == "RayEngine"  # trainer.engine=ray composes it
    trainer.callbacks.append(_kill_worker_after_step_1)
    summary = trainer.fit()
    run = tmp_path / "fault"
    recs = _rl_records(run)
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert [r["ray/worker_restarts"] for r in recs] == [0.0, 1.0, 1.0]
    assert all(r["async/staleness"] == 0.0 for r in recs)  # on-policy by default
    assert all("critic/value_loss" in r and r["actor/kl"] >= 0 for r in recs)
    assert summary["steps"] == 3 and summary["after"]["episodes"] == 4
    # Held-out episodes come back from both rollout workers (2 + 2), capped at 3 in all.
    for step in (0, 3):
        assert len((run / "eval_episodes" / f"step-{step:05d}.jsonl").read_text().splitlines()) == 3
    assert (run / "report.html").exists()
    ckpt = run / "checkpoints" / "step-3"
    assert sorted(p.name for p in (ckpt / "sharded").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    # The exported policy is a plain HF folder: `arborl eval` loads it.
    out = tmp_path / "eval.json"
    code = main([
        "eval", "--policy", str(ckpt / "policy"), "--env", "arborl/Maze-v0",
        "--num-episodes", "4", "--max-turns", "3", "--no-baselines", "--json", str(out),
    ])  # fmt: skip
    assert code == 0
    rows = json.loads(out.read_text())["rows"]
    assert rows[0]["episodes"] == 4 and 0.0 <= rows[0]["success"] <= 1.0
    _serve_answers(
        ckpt / "policy", wait_for_health
    )  # ... and so does `arborl serve`, over real HTTP
    capsys.readouterr()


@pytest.mark.slow
def test_sharded_checkpoint_resumes_on_another_number_of_ranks(ray_instance, tmp_path):
    common = ("sft.enabled=false", "trainer.save_every=1")
    two = _cfg(tmp_path, "res", *common, "trainer.total_steps=2", "ray.num_train_ranks=2",
               "ray.num_rollout_workers=1")  # fmt: skip
    RLTrainer(two).fit()
    run = tmp_path / "res"
    # Resume the 2-rank checkpoint on 1 rank (DCP reshards on load) and go on to step 3.
    one = _cfg(tmp_path, "res", *common, "trainer.total_steps=3", "ray.num_train_ranks=1",
               "ray.num_rollout_workers=1", "trainer.resume=auto")  # fmt: skip
    summary = RLTrainer(one).fit()
    assert summary["steps"] == 3
    recs = _rl_records(run)
    assert [r["step"] for r in recs] == [1, 2, 3]  # no step was repeated
    ckpt = run / "checkpoints" / "step-3"
    assert sorted(p.name for p in (ckpt / "sharded").glob("*.distcp")) == ["__0_0.distcp"]
    # The sharded files alone rebuild the same policy as the exported policy/ folder.
    rebuilt = export_checkpoint(ckpt, tmp_path / "rebuilt")
    a = load_file(rebuilt / "model.safetensors")
    b = load_file(ckpt / "policy" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_colocated_placement_and_one_step_off(ray_instance, tmp_path):
    colo = _cfg(tmp_path, "colo", "sft.enabled=false", "trainer.total_steps=2",
                "ray.placement=colocated", "ray.num_train_ranks=2",
                "ray.num_rollout_workers=2")  # fmt: skip
    assert RLTrainer(colo).fit()["steps"] == 2
    off = _cfg(tmp_path, "one_step_off", "sft.enabled=false", "trainer.total_steps=3",
               "ray.one_step_off=true", "ray.num_rollout_workers=2")  # fmt: skip
    RLTrainer(off).fit()
    recs = _rl_records(tmp_path / "one_step_off")
    # Step 1 waits for its own rollout; steps 2 and 3 train on data one version old.
    assert [r["async/staleness"] for r in recs] == [0.0, 1.0, 1.0]


def test_bad_ray_settings_fail_before_any_work(tmp_path):
    from arborl.config import ConfigError

    with pytest.raises(ConfigError, match="num_rollout_workers=1 must equal"):
        RLTrainer(_cfg(tmp_path, "bad", "ray.placement=colocated", "ray.num_train_ranks=2"))
    with pytest.raises(ConfigError, match="needs ray.placement=split"):
        RLTrainer(_cfg(tmp_path, "bad", "ray.placement=colocated", "ray.one_step_off=true"))


@pytest.mark.slow
def test_score_mode_trains_on_ray(ray_instance, tmp_path):
    # agent.action_mode=score on 2 rollout workers (their batches merged, candidates padded
    # to a common K x L) and 2 FSDP train ranks (the reference and the update recompute the
    # categorical): no invalid action, and on-policy the recomputed categorical gives the
    # workers' log-probs back (one minibatch per step: ratio 1).
    cfg = _cfg(tmp_path, "score", "sft.enabled=false", "trainer.total_steps=2",
               "agent.action_mode=score", "algo.kl_coef=0.05", "ray.num_train_ranks=2",
               "ray.num_rollout_workers=2", "reward.sources={env: 1.0, potential: 0.1}")  # fmt: skip
    assert RLTrainer(cfg).fit()["steps"] == 2
    recs = _rl_records(tmp_path / "score")
    assert [r["train/invalid_rate"] for r in recs] == [0.0, 0.0]
    for r in recs:
        assert r["actor/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
        assert 0.0 < r["actor/entropy"] <= 1.3863
