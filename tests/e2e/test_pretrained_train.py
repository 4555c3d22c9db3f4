"""`arborl train` on a real pretrained LM: SmolLM2-135M-Instruct with LoRA, two GRPO steps.

Toy size (2 tasks x 2 episodes of at most 2 turns, 2 held-out episodes) so the run fits CI;
the learning result itself is in docs/BENCHMARKS.md. The first run fetches and converts
the checkpoint (tests/models/test_pretrained.py); later runs load it from the cache.
"""

import json
import math
import re

import pytest
import torch

from arborl.cli.main import main
from arborl.models import load_policy
from arborl.train.runlog import read_metrics
from tests._status import owed_status

SMOL_LORA = [
    "model.name_or_path=smollm2-135m-instruct",
    "model.lora_rank=4",
    "env=frozenlake",
    "env.kwargs.size=3",
    "agent.include_instruction=false",
    "rollout.num_tasks=2",
    "rollout.group_size=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=2",
    "sft.enabled=false",
    "eval.num_episodes=2",
    "trainer.total_steps=2",
    "trainer.save_trajectories=0",
    "trainer.progress=false",
    "trainer.loggers=[]",
    "trainer.report=false",
    "trainer.plots=false",
    # The untrained model rarely writes a move, so every group may tie (zero advantage):
    # the entropy bonus and keeping those rows make sure the adapters get a gradient.
    "algo.entropy_coef=0.01",
    "algo.drop_zero_adv=false",
    "algo.lr=1e-3",
    "algo.warmup_steps=0",
]
LORA_TARGETS = ("q_proj", "v_proj")  # arborl.models.lora.apply_lora's default


@pytest.mark.slow
def test_train_smollm2_with_lora_updates_only_the_adapted_weights(tmp_path):
    code = main(["train", *SMOL_LORA, f"trainer.output_dir={tmp_path}", "trainer.name=smol"])
    run = tmp_path / "smol"
    assert code == owed_status(run)  # 3: two toy steps with no signal say they learned nothing
    rl = [r for r in read_metrics(run / "metrics.jsonl") if "train/success" in r]
    assert [r["step"] for r in rl] == [1, 2]
    for r in rl:
        assert math.isfinite(r["actor/pg_loss"]) and r["train/tokens"] > 0
        # One minibatch per rollout batch: the update scores the sampled tokens with the
        # weights that sampled them, so the ratio is 1 up to float rounding.
        assert r["actor/ratio_max"] == pytest.approx(1.0, abs=1e-3)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["gain"]["tasks"] == 2
    # The update's micro-batches were sized to this model and the memory free (a fixed
    # 16,384 tokens would peak near 23 GiB for SmolLM2: arborl.train.memory).
    sized = re.search(
        r"micro-batches: up to (\d+) tokens \(activations ~([\d.]+) MiB a token \(measured\), "
        r"([\d.]+) GiB free",
        (run / "run.log").read_text(),
    )
    assert sized, "run.log does not say how the update's micro-batches were sized"
    tokens, mib, gib = int(sized[1]), float(sized[2]), float(sized[3])
    assert mib > 0.5 and 2 * mib * tokens <= 0.5 * gib * 1024 * 1.01

    base, _ = load_policy("smollm2-135m-instruct")
    trained, tok = load_policy(str(run / "checkpoints" / "step-2" / "policy"))
    assert len(tok) == 49152 and tok.eos_token == "<|im_end|>"
    before, after = base.state_dict(), trained.state_dict()
    assert after.keys() == before.keys()  # a plain causal LM: the adapters are merged
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed, "LoRA training left every weight unchanged"
    assert all(any(f".{t}." in k for t in LORA_TARGETS) for k in changed), sorted(changed)
    assert {k.split(".")[2] for k in changed} == {str(i) for i in range(30)}  # every layer
