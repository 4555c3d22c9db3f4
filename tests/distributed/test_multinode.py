"""`arborl train trainer.engine=ray` on a real Ray cluster of two nodes.

Both nodes run on this machine, but as Ray runs them on two: each is its own `ray start`
(raylet, object store, CPUs and a custom resource), the second joining the head's
address; these are the commands of docs/distributed.md, "Two machines". The train group
is pinned to the head (`ray.train_resources={head_node: ...}`), the rollout workers to the
second node, and the run log says where each actor ran. Then the second node is killed
at the end of RL step 1 (its raylet, then every process it ran, kill -9): its rollout
worker is re-placed on the head, step 2's lost share is re-run, and the run finishes with
every step's episodes whole and once. Each test took 1.5-2 min on 2 cores shared at load
~9 (mostly 6-7 processes importing torch), so both are marked slow.
"""

import json
import os
import re
import signal
from pathlib import Path

import pytest

from arborl.cli.main import main
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer
from arborl.train.runlog import read_metrics
from tests._status import owed_status

HEAD, WORKER = {"head_node": 1}, {"worker_node": 1}  # `ray start --resources` of each node
PINS = ["ray.train_resources={head_node: 0.01}", "ray.rollout_resources={worker_node: 0.01}"]
TOY = [
    "model.name_or_path=tiny-0.1m",
    "sft.enabled=false",
    "rollout.num_tasks=2",
    "rollout.group_size=2",
    "rollout.max_turns=3",
    "eval.num_episodes=2",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.report=false",
    "trainer.save_trajectories=4",  # every episode of every step
    "reward.sources={env: 1.0, invalid_action: 0.5}",
    "algo.drop_zero_adv=false",
    "trainer.engine=ray",
    "ray.cpus_per_worker=0.25",
    *PINS,
]


def _placements(run) -> list[tuple[str, str]]:
    """(actor, node id) for each 'ray placement:' line of the run log, in order."""
    text = (run / "run.log").read_text()
    return re.findall(r"ray placement: (.+?) on node (\w+)", text)


def _rl_records(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if "train/success" in r]


def _assert_whole_episodes_once(run, num_steps, per_step=4):
    """Every step trained `per_step` episodes (2 tasks x 2), each once and each whole."""
    for step in range(num_steps):
        rows = [json.loads(x) for x in (run / "trajectories" / f"step-{step:05d}.jsonl").open()]
        ids = [r["meta"]["traj_id"] for r in rows]
        assert len(rows) == per_step and len(set(ids)) == per_step, ids
        for r in rows:  # ended by the env or the turn limit, never by an error
            assert r["meta"]["truncation_reason"] != "env_error", r["meta"]
            assert r["steps"][-1]["terminated"] or r["steps"][-1]["truncated"]


@pytest.mark.slow
def test_train_group_on_the_head_rollout_workers_on_the_second_node(ray_cluster, tmp_path):
    head = ray_cluster.add_node(num_cpus=1, resources=HEAD)
    worker = ray_cluster.add_node(num_cpus=1, resources=WORKER)
    # `arborl train` itself (in this process: one interpreter fewer to start on 2 cores)
    code = main([
        "train", *TOY, f"ray.address={ray_cluster.address}", f"trainer.output_dir={tmp_path}",
        "trainer.name=two", "trainer.total_steps=2", "ray.num_rollout_workers=2",
    ])  # fmt: skip
    run = tmp_path / "two"
    assert code == owed_status(run)  # 3: a toy run that learned nothing says so
    assert _placements(run) == [
        ("train rank 0", head.node_id),
        ("rollout worker 0", worker.node_id),
        ("rollout worker 1", worker.node_id),
    ]
    recs = _rl_records(run)
    assert [r["step"] for r in recs] == [1, 2]
    assert all(r["ray/worker_restarts"] == 0.0 for r in recs)
    _assert_whole_episodes_once(run, 2)
    assert (run / "checkpoints" / "step-2" / "policy" / "model.safetensors").exists()


@pytest.mark.fault("node loss")
@pytest.mark.slow
def test_losing_the_rollout_node_mid_run_re_places_its_workers(ray_cluster, tmp_path):
    head = ray_cluster.add_node(num_cpus=1, resources=HEAD)
    worker = ray_cluster.add_node(num_cpus=1, resources=WORKER)
    cfg = load_train_config([
        *TOY, f"ray.address={ray_cluster.address}", f"trainer.output_dir={tmp_path}",
        "trainer.name=loss", "trainer.total_steps=3",
    ])  # fmt: skip

    def lose_the_worker_node(trainer):
        # At the end of RL step 1, so step 2's rollout is sent to a node that is gone: its
        # raylet first (kill -9), then every process it ran, as when a machine dies.
        if trainer.step == 0:
            os.kill(worker.raylet_pid, signal.SIGKILL)
            ray_cluster.kill(worker)

    trainer = RLTrainer(cfg)
    trainer.callbacks.append(lose_the_worker_node)
    assert trainer.fit()["steps"] == 3
    run = tmp_path / "loss"
    before, after = _placements(run)[:2], _placements(run)[2:]
    assert before == [("train rank 0", head.node_id), ("rollout worker 0", worker.node_id)]
    assert after == [("rollout worker 0", head.node_id)]  # re-placed on the live node
    text = (run / "run.log").read_text()
    assert "rollout worker 0 was lost during 'rollout'" in text  # its share is re-run
    assert f"rollout worker 0's node {worker.node_id} is lost" in text
    recs = _rl_records(run)
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert [r["ray/worker_restarts"] for r in recs] == [0.0, 1.0, 1.0]
    assert all(r["rollout/env_errors"] == 0.0 for r in recs)
    _assert_whole_episodes_once(run, 3)


def test_custom_resources_are_checked_before_any_work(tmp_path):
    from arborl.config import ConfigError

    def cfg(*extra):
        return load_train_config([*TOY, f"trainer.output_dir={tmp_path}", *extra])

    with pytest.raises(ConfigError, match=r"ray.rollout_resources.CPU=1.0: custom resources"):
        RLTrainer(cfg("ray.rollout_resources={CPU: 1}"))
    with pytest.raises(ConfigError, match=r"ray.train_resources.head_node=0.0"):
        RLTrainer(cfg("ray.train_resources={head_node: 0}"))
    with pytest.raises(ConfigError, match="ray.rollout_resources must stay empty"):
        RLTrainer(cfg("ray.placement=colocated", "ray.num_rollout_workers=1"))


def test_the_docs_walkthrough_is_what_these_tests_run():
    doc = (Path(__file__).parents[2] / "docs" / "distributed.md").read_text()
    walkthrough = doc[doc.index("## Two machines") : doc.index("## Worker priority")]
    assert f"--num-cpus=1 --resources='{json.dumps(HEAD)}'" in walkthrough
    assert f"--num-cpus=1 --resources='{json.dumps(WORKER)}'" in walkthrough
    for setting in ("trainer.engine=ray", "ray.cpus_per_worker=0.25", "ray.num_rollout_workers=2"):
        assert setting in walkthrough  # TOY's, and the first test's number of workers
    assert all(f"'{pin}'" in walkthrough for pin in PINS)
