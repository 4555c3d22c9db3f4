"""`algo.correction` in the loop (`arborl.train.correction`): "auto" per engine, the
trainer's old_logp against a deliberately perturbed sampler, and a real step's metrics."""

import json
import math

import pytest
import torch

from arborl.config import ConfigError
from arborl.data import Batch
from arborl.distributed.engine import RayEngine
from arborl.train.config import load_train_config
from arborl.train.correction import correct_rows, resolve_correction
from arborl.train.engine import LocalEngine
from arborl.train.rl import RLTrainer
from arborl.train.vllm_engine import VLLMEngine


class SilentEngine:
    """A plug-in engine that declares nothing about its sampler and cannot rescore."""

    name = "silent"


@pytest.mark.parametrize(
    ("engine", "overrides", "mode"),
    [
        (LocalEngine, [], "none"),  # one model, one dtype, one version
        (LocalEngine, ["model.dtype=bfloat16"], "none"),  # sampler and trainer both bf16
        (VLLMEngine, [], "token_tis"),  # vLLM's kernels against the HF forward
        (RayEngine, [], "none"),  # lockstep workers hold the trainer's weights
        (RayEngine, ["ray.one_step_off=true"], "token_tis"),  # one version behind
    ],
)
def test_auto_resolves_by_the_engines_sampler(engine, overrides, mode):
    cfg, resolved = resolve_correction(load_train_config(overrides), engine)
    assert cfg.algo.correction.mode == resolved.record.name == mode
    assert resolved.recompute == (mode != "none")
    assert cfg.algo.correction.recompute_old_logp == resolved.recompute


def test_explicit_modes_and_an_engine_that_cannot_rescore():
    cfg = load_train_config(["algo.correction.mode=none"])
    assert resolve_correction(cfg, VLLMEngine)[1].recompute is False  # none stays none
    cfg = load_train_config(
        ["algo.correction.mode=none", "algo.correction.recompute_old_logp=true"]
    )
    assert resolve_correction(cfg, LocalEngine)[1].recompute  # measure only
    with pytest.raises(ConfigError, match="SilentEngine has no policy_logp"):
        resolve_correction(load_train_config(["algo.correction.mode=seq_tis"]), SilentEngine)
    # undeclared: auto keeps a plug-in engine running, without a correction
    assert resolve_correction(load_train_config([]), SilentEngine)[1].record.name == "none"


def test_perturbed_sampler_logprobs_by_hand():
    """The sampler's logprobs are the trainer's minus a known perturbation; the weights,
    the new old_logp and the metrics are worked out from it."""
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]])
    delta = torch.tensor([[math.log(4.0), -math.log(2.0), 0.0], [0.1, 0.1, 0.1]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    batch = Batch({"old_logp": trainer - delta, "response_mask": mask})
    cfg, resolved = resolve_correction(
        load_train_config(["algo.correction.mode=token_tis", "algo.correction.cap=3"]), LocalEngine
    )
    out, metrics = correct_rows(batch, trainer, resolved)
    assert torch.equal(out.tensors["old_logp"], trainer)  # PPO's anchor is now the trainer
    e = math.exp(0.1)
    # rho = 4 -> cap 3; 0.5; padding 0; e^0.1 three times
    torch.testing.assert_close(out.tensors["is_weight"], torch.tensor([[3.0, 0.5, 0.0], [e] * 3]))
    lrs = [math.log(4.0), -math.log(2.0), 0.1, 0.1, 0.1]
    assert metrics["mismatch/log_ratio_mean"] == pytest.approx(sum(lrs) / 5)
    assert metrics["mismatch/log_ratio_abs_max"] == pytest.approx(math.log(4.0))
    kl = sum(math.exp(x) - 1 - x for x in lrs) / 5
    assert metrics["mismatch/kl"] == pytest.approx(kl, rel=1e-5)
    assert metrics["mismatch/tokens_truncated"] == pytest.approx(1 / 5)
    assert metrics["mismatch/seqs_truncated"] == pytest.approx(1 / 2)
    assert metrics["mismatch/weight_mean"] == pytest.approx((3.0 + 0.5 + 3 * e) / 5)


TOY = [
    "model.name_or_path=tiny-0.1m", "sft.steps=10", "sft.num_demos=4", "sft.warmup_steps=1",
    "rollout.num_tasks=4", "rollout.group_size=4", "rollout.max_turns=4",
    "eval.num_episodes=4", "trainer.total_steps=1", "trainer.progress=false",
    "trainer.plots=false", "trainer.report=false", "trainer.loggers=[]",
    "trainer.save_trajectories=0", "trainer.num_threads=1", "algo.drop_zero_adv=false",
]  # fmt: skip


def _step_record(trainer) -> dict:
    rows = [json.loads(x) for x in (trainer.run.path / "metrics.jsonl").open()]
    return next(r for r in rows if "train/success" in r)


@pytest.mark.parametrize("mode", ["none", "token_tis"])
def test_a_local_step_logs_the_mismatch(tmp_path, mode):
    """Local engine: the sampler (HF generate with a KV cache) and the trainer's full
    forward are the same weights in fp32, so the measured gap is float rounding only."""
    cfg = load_train_config([*TOY, f"algo.correction.mode={mode}",
                             f"trainer.output_dir={tmp_path}", f"trainer.name={mode}"])  # fmt: skip
    trainer = RLTrainer(cfg)
    trainer.fit()
    r = _step_record(trainer)
    assert r["async/staleness"] == 0.0 and "actor/pg_loss" in r
    if mode == "none":
        assert not any(k.startswith("mismatch/") for k in r) and "time/old_logp_s" not in r
        return
    assert r["mismatch/log_ratio_abs_max"] < 1e-3
    assert r["mismatch/kl"] < 1e-6
    assert r["mismatch/tokens_truncated"] == 0.0
    assert r["mismatch/weight_mean"] == pytest.approx(1.0, abs=1e-3)
    assert "time/old_logp_s" in r
