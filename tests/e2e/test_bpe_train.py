"""`arborl train`, `arborl sft` and `arborl eval` on a real byte-level BPE policy, by preset
name (`model.name_or_path=bpe-tiny-0.1m`: GPT-2's BPE + ChatML) and from the checkpoint
that `arborl sft` writes (which goes through the D5 tokenizer reload).

The ratio check has teeth with BPE: were any rollout ids re-encoded from text, the
trainer's logprobs of the stored ids would not be the rollout's and `ratio_max` would move
off 1 on the first minibatch.
"""

import json

import pytest
import torch

from arborl.cli.main import main
from arborl.models import load_policy
from arborl.train.runlog import read_metrics

TOY = [
    "rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=3", "eval.num_episodes=2",
    "trainer.progress=false", "trainer.total_steps=1", "trainer.plots=false",
    "algo.drop_zero_adv=false",
]  # fmt: skip
TEXT = "Numbers: 1 2 7 8. Target: 58. 🌲"


def _first_step(run):
    recs = read_metrics(run / "metrics.jsonl")
    return recs, next(r for r in recs if "train/success" in r)


def _status_of(run) -> int:
    """The exit status `arborl train` owes `run`: 3 when its summary says it learned
    nothing (a toy run often has no signal; docs/training.md, "A run that learned
    nothing"), else 0."""
    import json

    return 3 if json.loads((run / "summary.json").read_text())["failures"]["verdict"] else 0


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])  # ppo: a critic on the 50,259-id vocabulary
def test_sft_then_rl_on_the_bpe_preset_by_name(tmp_path, algo):
    args = ["train", "model.name_or_path=bpe-tiny-0.1m", "sft.steps=4", "sft.num_demos=4",
            "sft.batch_size=8", f"algo={algo}", "algo.ppo_epochs=1", *TOY,
            f"trainer.output_dir={tmp_path}", "trainer.name=r"]  # fmt: skip
    assert main(args) == _status_of(tmp_path / "r")
    recs, step = _first_step(tmp_path / "r")
    assert (algo == "ppo") == ("critic/value_loss" in step)
    sft = [r for r in recs if r.get("phase") == "sft"]
    assert sft and all(torch.isfinite(torch.tensor(r["loss"])) for r in sft if "loss" in r)
    # rollout logprobs are the trainer's own on BPE ids (nothing re-encoded): ratio 1 on
    # the one update of the step (ppo_epochs=1: a second epoch would see updated weights)
    assert abs(step["actor/ratio_max"] - 1.0) < 1e-3, step
    final = tmp_path / "r" / "checkpoints" / "step-1" / "policy"
    _, tok = load_policy(str(final))
    assert len(tok) == 50259 and tok.eos_token == "<|im_end|>"


@pytest.mark.slow
def test_arborl_sft_then_tree_train_then_eval_on_bpe(tmp_path, capsys):
    out = tmp_path / "warm"
    sft = ["sft", "model.name_or_path=bpe-tiny-0.1m", "sft.steps=4", "sft.num_demos=4",
           "sft.batch_size=8", "eval.num_episodes=2", "trainer.progress=false", "--out", str(out)]  # fmt: skip
    assert main(sft) == 0
    losses = [r["sft/loss"] for r in read_metrics(out / "metrics.jsonl") if "sft/loss" in r]
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    policy = out / "checkpoints" / "sft" / "policy"
    _, tok = load_policy(str(policy))
    _, fresh = load_policy("bpe-tiny-0.1m")
    assert tok.encode(TEXT, add_special_tokens=False) == fresh.encode(
        TEXT, add_special_tokens=False
    )
    # tree rollouts (rollout.mode=tree): every search node one row of its sampled ids
    args = ["train", f"model.name_or_path={policy}", "sft.enabled=false", "rollout.mode=tree",
            "search.algo=tot-bfs", "search.budget=4", "search.params={breadth: 2, beam: 1}",
            "rollout.max_new_tokens=4", *TOY, f"trainer.output_dir={tmp_path}",
            "trainer.name=tree"]  # fmt: skip
    assert main(args) == _status_of(tmp_path / "tree")
    _, step = _first_step(tmp_path / "tree")
    assert abs(step["actor/ratio_max"] - 1.0) < 1e-3, step
    for spec in (str(policy), "bpe-tiny-0.1m"):  # the SFT checkpoint, the preset by name
        js = tmp_path / "eval.json"
        assert main(["eval", "--policy", spec, "--env", "arborl/Maze-v0", "--num-episodes",
                     "2", "--no-baselines", "--json", str(js)]) == 0  # fmt: skip
        (row,) = json.loads(js.read_text())["rows"]
        assert row["policy"] == spec and row["episodes"] == 2
