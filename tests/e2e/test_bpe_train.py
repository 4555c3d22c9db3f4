"""`arborl train` (SFT warm start + GRPO) on a real byte-level BPE policy (GPT-2 + ChatML).

The policy is `arborl.models.bpe.build_bpe_policy` saved as an HF directory, so it goes
through the same `load_policy(dir)` as any checkpoint (and the D5 tokenizer reload).
"""

import pytest
import torch

from arborl.cli.main import main
from arborl.models import load_policy, save_policy
from arborl.models.bpe import build_bpe_policy
from arborl.train.runlog import read_metrics


@pytest.mark.slow
def test_sft_then_grpo_on_a_bpe_policy(tmp_path):
    model, tok = build_bpe_policy(seed=0)
    save_policy(model, tok, tmp_path / "bpe")
    _, again = load_policy(str(tmp_path / "bpe"))
    text = "Numbers: 1 2 7 8. Target: 58. 🌲"
    assert again.encode(text, add_special_tokens=False) == tok.encode(
        text, add_special_tokens=False
    )
    args = [
        "train", f"model.name_or_path={tmp_path / 'bpe'}", "sft.steps=4", "sft.num_demos=4",
        "sft.batch_size=8", "rollout.num_tasks=2", "rollout.group_size=2",
        "rollout.max_turns=3", "eval.num_episodes=2", "trainer.progress=false",
        "trainer.total_steps=1", "trainer.plots=false", "algo.drop_zero_adv=false",
        f"trainer.output_dir={tmp_path}", "trainer.name=r",
    ]  # fmt: skip
    assert main(args) == 0
    recs = read_metrics(tmp_path / "r" / "metrics.jsonl")
    sft = [r for r in recs if r.get("phase") == "sft"]
    assert sft and all(torch.isfinite(torch.tensor(r["loss"])) for r in sft if "loss" in r)
    step = next(r for r in recs if "train/success" in r)
    # rollout logprobs are the trainer's own on BPE ids (nothing re-encoded): ratio 1
    assert abs(step["actor/ratio_max"] - 1.0) < 1e-3, step
