"""RL task files: `arborl curate`'s rl.parquet drives `arborl train env.tasks_file=...`
(tiny-0.1m, one RL step), and bad task files fail naming the row and the fix."""

import json

import pytest

from arborl.cli.main import main
from arborl.curate import CurateConfig, SourceConfig, read_sources, run_curation
from arborl.curate.formats import write_format
from arborl.data import Trajectory, read_trajectories
from arborl.data.tasks import read_task_seeds, sample_task_seeds
from tests.curate.conftest import FIXTURES

MAZE = "arborl/Maze-v0"


def _tasks(tmp_path, trajs, name="t.parquet"):
    write_format("verl", tmp_path / name, trajs)
    return tmp_path / name


def test_read_task_seeds_checks_rows(tmp_path):
    good = Trajectory("a", MAZE, seed=5, meta={"split": "train"})
    other = Trajectory("b", "web", seed=None)
    path = _tasks(tmp_path, [good, other])
    assert read_task_seeds(path, MAZE, "train") == [5]  # the web row is skipped
    with pytest.raises(ValueError, match="env_split='train' but env.train_split='val'"):
        read_task_seeds(path, MAZE, "val")
    with pytest.raises(
        ValueError, match=r"no rows of env 'arborl/Sokoban-v0'.*\['arborl/Maze-v0', 'web'\]"
    ):
        read_task_seeds(path, "arborl/Sokoban-v0", "train")
    no_seed = _tasks(tmp_path, [Trajectory("c", MAZE)], "n.parquet")
    with pytest.raises(ValueError, match="row 1: extra_info.seed is missing"):
        read_task_seeds(no_seed, MAZE, "train")


def test_sample_task_seeds_is_seeded_and_covers_the_file():
    seeds = [10, 11, 12, 13]
    draw = sample_task_seeds(seeds, 4, seed=7)
    assert sorted(draw) == seeds  # without replacement while they last
    assert draw == sample_task_seeds(seeds, 4, seed=7)
    assert len(sample_task_seeds(seeds, 9, seed=1)) == 9 and set(
        sample_task_seeds(seeds, 9, 1)
    ) <= set(seeds)


TOY = [
    "model.name_or_path=tiny-0.1m",
    "sft.enabled=false",
    "rollout.num_tasks=2",
    "rollout.group_size=2",
    "rollout.max_turns=3",
    "eval.num_episodes=2",
    "trainer.progress=false",
    "trainer.total_steps=2",
    "trainer.save_every=0",
    "trainer.plots=false",
    "trainer.save_trajectories=4",
    "algo.drop_zero_adv=false",
]


def test_train_draws_tasks_from_curated_file(tmp_path):
    cfg = CurateConfig(sources=[SourceConfig(path=str(FIXTURES / "verl_maze.parquet"), domain="maze"),
                                SourceConfig(path=str(FIXTURES / "arborl_maze.jsonl"), domain="maze")])  # fmt: skip
    cfg.split.ratios = {"train": 1.0}
    run_curation(cfg, tmp_path / "cur")
    tasks = tmp_path / "cur" / "train" / "rl.parquet"
    file_seeds = set(read_task_seeds(tasks, MAZE, "train"))
    assert file_seeds == {100, 101, 103, 110, 111, 112, 113}
    code = main(["train", *TOY, f"env.tasks_file={tasks}", f"trainer.output_dir={tmp_path}",
                 "trainer.name=run"])  # fmt: skip
    verdict = json.loads((tmp_path / "run" / "summary.json").read_text())["failures"]["verdict"]
    assert code == (3 if verdict else 0)  # 3: learned nothing (docs/training.md)
    steps = sorted((tmp_path / "run" / "trajectories").glob("step-*.jsonl"))
    assert len(steps) == 2
    used = {t.seed for p in steps for t in read_trajectories(p)}
    assert used and used <= file_seeds
    # the run's own rollout records read back as arborl-format curation input
    res = read_sources([SourceConfig(path=str(tmp_path / "run" / "trajectories" / "*.jsonl"))])
    assert not res.malformed and len(res.records) == 8  # 2 steps x 2 tasks x 2 episodes
    assert {r.domain for r in res.records} == {MAZE}


def test_train_rejects_a_bad_task_file_before_work(tmp_path, capsys):
    path = _tasks(tmp_path, [Trajectory("a", "web", seed=1)])
    with pytest.raises(ValueError, match="no rows of env 'arborl/Maze-v0'"):
        main(["train", *TOY, f"env.tasks_file={path}", f"trainer.output_dir={tmp_path}"])
