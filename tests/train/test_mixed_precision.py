"""model.dtype=bfloat16 is mixed precision: fp32 weights and optimizer, bf16 matmuls."""

from __future__ import annotations

import torch

from arborl.train.config import load_train_config

SMALL = [
    "model.name_or_path=tiny-0.1m", "sft.steps=2", "sft.num_demos=2", "rollout.num_tasks=2",
    "rollout.group_size=2", "rollout.max_turns=2", "rollout.max_new_tokens=4",
    "eval.num_episodes=2", "eval.every=0", "trainer.progress=false", "trainer.plots=false",
    "trainer.save_every=0", "trainer.total_steps=1", "trainer.report=false",
]  # fmt: skip


def _linear_dtypes(model) -> tuple[list, object]:
    """A list that fills with the output dtype of every Linear call, and the hook handles."""
    seen: list[torch.dtype] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    return seen, hooks


def test_bfloat16_runs_every_pass_in_bf16_and_keeps_fp32_weights(tmp_path):
    from arborl.train.rl import RLTrainer

    # PPO: GAE advantages are never all zero, so the update steps; the critic runs too.
    cfg = load_train_config(
        [*SMALL, "algo.name=ppo", "model.dtype=bfloat16", f"trainer.output_dir={tmp_path}"]
    )
    trainer = RLTrainer(cfg)
    model = trainer.engine.model
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # master weights
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seen, hooks = _linear_dtypes(model)
    critic_seen, critic_hooks = _linear_dtypes(trainer.engine.critic)
    try:
        trainer.fit()
    finally:
        for h in hooks + critic_hooks:
            h.remove()
    # SFT, rollouts, the update and the evaluations all ran their matmuls in bf16.
    assert len(seen) > 100 and set(seen) == {torch.bfloat16}
    assert critic_seen and set(critic_seen) == {torch.bfloat16}  # values and critic fit
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "the bf16 passes trained nothing"
    state = trainer.engine.opt.state_dict()["state"]
    assert state and {s["exp_avg"].dtype for s in state.values()} == {torch.float32}
    critic = trainer.engine.critic
    assert {p.dtype for p in critic.parameters()} == {torch.float32}


def test_float32_runs_in_float32(tmp_path):
    from arborl.train.rl import RLTrainer

    trainer = RLTrainer(load_train_config([*SMALL, f"trainer.output_dir={tmp_path}"]))
    seen, hooks = _linear_dtypes(trainer.engine.model)
    try:
        trainer.fit()
    finally:
        for h in hooks:
            h.remove()
    assert len(seen) > 100 and set(seen) == {torch.float32}


def test_ray_rollout_worker_rolls_out_and_evaluates_in_bf16(tmp_path):
    """The rollout worker of trainer.engine=ray (its methods called in this process, as a
    Ray actor calls them): rollout and evaluation matmuls run in bf16 on fp32 weights, and
    its behaviour logprobs are those of bf16 passes, not of fp32 ones."""
    from arborl.distributed.workers import RolloutRole

    def run(dtype: str):
        cfg = load_train_config(
            [*SMALL, f"model.dtype={dtype}", f"trainer.output_dir={tmp_path}", "model.seed=3"]
        )
        role = RolloutRole(cfg, 0, None)
        seen, hooks = _linear_dtypes(role.backend.model)
        try:
            out = role.rollout({"seeds": [1, 2], "group_offset": 0, "seed": 0}, -1)
            counts = role.evaluate({"seeds": [3, 4], "seed": 0}, -1)
        finally:
            for h in hooks:
                h.remove()
            role.close_pools()
        assert {p.dtype for p in role.backend.model.parameters()} == {torch.float32}
        return seen, out, counts

    seen, bf16, counts = run("bfloat16")
    assert len(seen) > 20 and set(seen) == {torch.bfloat16}
    assert len(bf16["episodes"]) == 4 and counts  # 2 tasks x group 2, and an evaluation
    seen32, fp32, _ = run("float32")
    assert set(seen32) == {torch.float32}
    lp16, lp32 = bf16["batch"].tensors["old_logp"], fp32["batch"].tensors["old_logp"]
    assert lp16.dtype == lp32.dtype == torch.float32  # stored in fp32 either way
    if lp16.shape == lp32.shape:  # same sampled tokens: the logprobs still differ
        assert not torch.equal(lp16, lp32)
