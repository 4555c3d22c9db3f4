"""Training in score mode (`agent.action_mode=score`): the update recomputes the rollout's
categorical exactly, a short RL run on Maze never takes an invalid action, and what
cannot run score mode says so before any work."""

import json

import pytest
import torch

from arborl.config import ConfigError
from arborl.generation.hf import HFBackend
from arborl.rollout import RolloutConfig, run_rollout
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer
from arborl.train.update import group_prompts, micro_batches, response_logp, score_rows

TOY = [
    "model.name_or_path=tiny-0.1m", "sft.steps=20", "sft.num_demos=8", "sft.lr=3e-3",
    "sft.warmup_steps=2", "rollout.num_tasks=3", "rollout.group_size=4",
    "rollout.max_turns=6", "eval.num_episodes=8", "trainer.total_steps=3",
    "trainer.progress=false", "trainer.plots=false", "trainer.report=false",
    "trainer.loggers=[]", "trainer.save_trajectories=0", "trainer.num_threads=1",
    "agent.action_mode=score",
]  # fmt: skip


@pytest.fixture(scope="module")
def scored_batch():
    from arborl.agent import AgentConfig
    from arborl.models import load_policy

    model, tok = load_policy("tiny-0.1m", seed=0)
    model.eval()
    agent = AgentConfig(action_mode="score", memory="last_k", memory_k=0, score_norm="token")
    cfg = RolloutConfig(num_tasks=3, group_size=4, max_turns=5, seed=3, temperature=0.7)
    res = run_rollout(HFBackend(model, tok), tok, "arborl/Maze-v0", None, cfg, agent)
    return model, res.batch


def test_the_update_recomputes_the_rollouts_categorical(scored_batch):
    model, batch = scored_batch
    old = batch.tensors["old_logp"]  # (R, 1)
    # The reference path (score_rows: micro-batches of any size) and the loss path
    # (response_logp over prompt-grouped micro-batches) give the rollout's numbers back.
    for budget in (10**9, 200):
        torch.testing.assert_close(score_rows(model, batch, 0.7, budget), old, atol=2e-5, rtol=0)
    grouped, groups = group_prompts(batch)
    p_len = int(batch.info["prompt_length"])
    mbs = micro_batches(grouped, 300, groups)
    assert len(mbs) > 1
    with torch.no_grad():
        parts = [response_logp(model, mb, p_len, 0.7, True) for mb in mbs]
    logp = torch.cat([lp for lp, _, _ in parts])
    torch.testing.assert_close(logp, grouped.tensors["old_logp"], atol=2e-5, rtol=0)
    entropy = torch.cat([e for _, e, _ in parts])  # (R, 1): of a 4-way categorical
    assert entropy.shape == (len(batch), 1) and all(parts[i][2] == 1 for i in range(len(parts)))
    assert (entropy > 0).all() and (entropy <= torch.log(torch.tensor(4.0)) + 1e-5).all()


def _steps(trainer) -> list[dict]:
    rows = [json.loads(x) for x in (trainer.run.path / "metrics.jsonl").open()]
    return [r for r in rows if "train/success" in r]


def test_a_short_run_on_maze_never_takes_an_invalid_action(tmp_path):
    # SFT warm start (token-level, as in generate mode), GRPO with a KL term (reference
    # log-probs of the categorical) and an entropy bonus (the categorical's entropy).
    # Potential shaping (toward G) gives groups mixed returns from the first step.
    cfg = load_train_config([*TOY, "algo=grpo", "algo.kl_coef=0.05", "algo.entropy_coef=0.01",
                             "reward.sources={env: 1.0, potential: 0.1}",
                             f"trainer.output_dir={tmp_path}", "trainer.name=score"])  # fmt: skip
    trainer = RLTrainer(cfg)
    before = {k: v.clone() for k, v in trainer.engine.model.state_dict().items()}
    summary = trainer.fit()
    steps = _steps(trainer)
    assert summary["steps"] == 3 and len(steps) == 3
    assert [r["train/invalid_rate"] for r in steps] == [0.0, 0.0, 0.0]
    assert summary["before"]["invalid_action_rate"] == 0.0
    assert summary["after"]["invalid_action_rate"] == 0.0
    trained = [r for r in steps if "actor/pg_loss" in r]
    assert trained, "no step had a group with mixed returns: the toy start is too weak/strong"
    for r in trained:
        # one "token" per row, the categorical's: entropy of a 4-way choice, a finite KL
        assert 0.0 < r["actor/entropy"] <= 1.3863 and r["actor/tokens"] > 0
        assert r["actor/kl"] >= 0.0 and r["actor/ratio_max"] < 2.0
    after = trainer.engine.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_engines_that_cannot_score_refuse_before_any_work(tmp_path):
    from arborl.train.vllm_engine import VLLMEngine

    cfg = load_train_config([*TOY, "trainer.engine=vllm", f"trainer.output_dir={tmp_path}"])
    with pytest.raises(
        ConfigError, match="agent.action_mode=.score. needs a local model.*vLLM engine"
    ):
        VLLMEngine.check_config(cfg)
    with pytest.raises(ConfigError, match="rollout.mode='tree'"):
        load_train_config([*TOY, "rollout.mode=tree"])
    # the Ray engine runs the same rollout and update code: it accepts score mode
    from arborl.distributed.engine import check_ray_config

    check_ray_config(load_train_config([*TOY, "trainer.engine=ray"]))
