"""Ray mode learns: 2 rollout workers + 2 FSDP2 train ranks take the RL sanity suite's
Bandit (`tests/learning/envs.py`: four arms, one pays) from its random-action SFT start to
the sanity suite's target, judged on the same 200 held-out episodes before and after.

The env is registered by this test process only: the Ray engine hands its spec to every
actor (`arborl.envs.registry.specs_of` / `adopt`), as it does for a user's script.

Why a Bandit, not the Maze demo this test ran before: the demo's 160 steps and 500-maze
evaluation took 8-19 min on 2 cores (most of the suite's longest worker), and a gain of a
few points needed that length to clear chance. Here the answer is known and the margin is
wide (the local sanity suite's target: >= 0.85 held-out success, >= +0.4 over the start),
so a rollout worker that never receives the trained weights, a sharded gradient that is
not reduced, or a share evaluated twice fails it in about a minute. Measured 2026-12-03
(AMD EPYC, 2 cores, load ~2): 40 steps took 0.17 -> 0.84 in 65 s.
"""

import pytest

from arborl.envs import registry
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer

STEPS = 60
TARGET = 0.85


@pytest.mark.slow
def test_ray_mode_learns_the_bandit_from_its_random_start(ray_instance, tmp_path, monkeypatch):
    # Registered here, at run time and by name (not at import: other files' parametrized
    # tests list the registered ids when they are collected)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("arborl-test/RayBandit-v0", "tests.learning.envs:BanditEnv")
    cfg = load_train_config([
        "model.name_or_path=tiny-0.1m", "env.id=arborl-test/RayBandit-v0", "env.kwargs={}",
        "algo=grpo", "algo.lr=1e-3", "sft.num_demos=32", "sft.steps=200",
        "rollout.num_tasks=4", "rollout.group_size=8", f"trainer.total_steps={STEPS}",
        "trainer.num_threads=1", "eval.num_episodes=200", "eval.every=0",
        f"trainer.output_dir={tmp_path}", "trainer.name=learn", "trainer.engine=ray",
        "ray.num_train_ranks=2", "ray.num_rollout_workers=2",
        "trainer.save_every=0", "trainer.save_trajectories=0", "trainer.plots=false",
        "trainer.progress=false",
    ])  # fmt: skip
    summary = RLTrainer(cfg).fit()
    before, after, gain = summary["before"]["success"], summary["after"]["success"], summary["gain"]
    print(f"Ray-mode learning: {before:.3f} -> {after:.3f}, paired gain {gain['gain']:+.3f} "
          f"[{gain['gain_lo']:+.3f}, {gain['gain_hi']:+.3f}] in {summary['wall_s']} s")  # fmt: skip
    assert summary["steps"] == STEPS and gain["tasks"] == 200
    assert before < 0.4, f"the start policy should be near chance, got {before}"
    assert after >= TARGET and after - before >= 0.4, (before, after, gain)
    assert gain["gain_lo"] > 0 and gain["worsened"] <= gain["improved"] / 10, gain
