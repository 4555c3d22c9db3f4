"""`arborl train` and `arborl sft` end to end at toy size, through the real CLI parser."""

import json

import pytest

from arborl.cli.main import main
from arborl.models import load_policy
from arborl.train.runlog import read_metrics
from tests._status import owed_status

TOY = [
    "model.name_or_path=tiny-0.1m",
    "sft.steps=5",
    "sft.num_demos=4",
    "rollout.num_tasks=2",
    "rollout.group_size=2",
    "rollout.max_turns=4",
    "eval.num_episodes=4",
    "trainer.progress=false",
    "trainer.total_steps=2",
    "trainer.save_trajectories=2",
    "reward.sources={env: 1.0, invalid_action: 0.5}",
    "algo.drop_zero_adv=false",
]


DIAGNOSTICS = (
    "actor/entropy", "actor/clipfrac", "actor/approx_kl", "actor/grad_norm", "adv/mean",
    "adv/std", "adv/groups_with_signal", "rollout/groups_mixed", "rollout/len_mean",
    "train/tokens",
)  # fmt: skip


def _train(tmp_path, name, *extra):
    return main(["train", *TOY, f"trainer.output_dir={tmp_path}", f"trainer.name={name}", *extra])


def _check_run(run, steps, plots=True):
    assert (run / "config.yaml").exists() and (run / "run.log").exists()
    recs = read_metrics(run / "metrics.jsonl")
    rl = [r for r in recs if "train/success" in r]
    assert [r["step"] for r in rl] == list(range(1, steps + 1))
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert (run / "checkpoints" / f"step-{steps}" / "trainer_state.pt").exists()
    assert (run / "learning_curves.png").exists() == plots
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == steps
    for key in ("before", "after"):
        assert 0.0 <= summary[key]["success"] <= 1.0 and summary[key]["episodes"] == 4
    gain = summary["gain"]  # paired on the same 4 tasks: the difference of the two rates
    assert gain["tasks"] == 4
    assert gain["gain"] == pytest.approx(summary["after"]["success"] - summary["before"]["success"])
    assert gain["improved"] - gain["worsened"] == pytest.approx(4 * gain["gain"])
    assert not any("outcomes" in k for r in read_metrics(run / "metrics.jsonl") for k in r)
    # The report (refreshed at each evaluation) and the held-out episodes it shows.
    assert (run / "report.html").stat().st_size > 1_000_000  # Plotly is inlined
    for step in (0, steps):
        assert len((run / "eval_episodes" / f"step-{step:05d}.jsonl").read_text().splitlines()) == 4
    return recs


@pytest.mark.parametrize("algo", ["ppo", "grpo", "rloo", "reinforce_pp", "gigpo"])
def test_train_each_algo(algo, tmp_path, capsys):
    plots = algo == "grpo"  # one run draws the PNG; matplotlib is slow to import
    code = _train(tmp_path, algo, f"algo={algo}", f"trainer.plots={str(plots).lower()}")
    assert code == owed_status(tmp_path / algo)
    recs = _check_run(tmp_path / algo, 2, plots)
    assert any(r.get("phase") == "sft" for r in recs)
    assert any("actor/pg_loss" in r for r in recs)
    rl = [r for r in recs if "train/success" in r]  # issue 16's diagnostics, every step
    for key in DIAGNOSTICS + (("gigpo/shared_anchor_frac",) if algo == "gigpo" else ()):
        assert all(key in r for r in rl), key
    if algo == "ppo":
        assert any("critic/value_loss" in r for r in recs)
        assert (tmp_path / algo / "checkpoints" / "step-2" / "critic").is_dir()
    out = capsys.readouterr().out
    assert "held-out success before RL" in out and "after RL" in out
    assert "RL gain on the same tasks" in out


def test_train_with_async_envs_is_the_lockstep_run(tmp_path):
    """`rollout.async_envs=true` through the CLI: the same rollouts, so the same run."""
    for name, flag in (("lock", "false"), ("async", "true")):
        code = _train(tmp_path, name, f"rollout.async_envs={flag}", "trainer.plots=false")
        assert code == owed_status(tmp_path / name)
    runs = [[r for r in read_metrics(tmp_path / n / "metrics.jsonl") if "train/success" in r]
            for n in ("lock", "async")]  # fmt: skip
    keys = ("train/success", "rollout/len_mean", "train/tokens", "actor/pg_loss")
    assert len(runs[0]) == 2
    for a, b in zip(*runs):
        assert [a[k] for k in keys] == pytest.approx([b[k] for k in keys], abs=1e-6)


def test_train_with_kl_to_a_reference(tmp_path):
    code = _train(tmp_path, "kl", "algo.kl_coef=0.1", "trainer.plots=false")
    assert code == owed_status(tmp_path / "kl")
    recs = _check_run(tmp_path / "kl", 2, plots=False)
    kls = [r["actor/kl"] for r in recs if r.get("actor/kl") is not None]
    assert len(kls) == 2 and all(k >= 0 for k in kls)
    # The reference is the warm-started policy, so before the first update (one minibatch a
    # step) policy and reference agree exactly; against the pre-SFT weights they would not.
    assert kls[0] < 1e-6


def test_sft_then_train_from_its_policy(tmp_path, capsys):
    out = tmp_path / "warm"
    code = main(["sft", *TOY, "sft.steps=8", "--out", str(out)])
    assert code == 0
    assert "held-out success after SFT" in capsys.readouterr().out
    losses = [r["sft/loss"] for r in read_metrics(out / "metrics.jsonl") if "sft/loss" in r]
    assert len(losses) == 8
    assert (out / "config.yaml").exists() and (out / "report.html").exists()
    assert len((out / "eval_episodes" / "step-00008.jsonl").read_text().splitlines()) == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["after"]["episodes"] == 4
    policy = out / "checkpoints" / "sft" / "policy"
    model, tok = load_policy(str(policy))
    assert tok.eos_token_id is not None
    # RL starts from exactly those weights (ppo: the critic starts from them too).
    code = _train(
        tmp_path,
        "rl",
        f"model.name_or_path={policy}",
        "sft.enabled=false",
        "algo=ppo",
        "trainer.plots=false",
    )
    assert code == 0
    recs = _check_run(tmp_path / "rl", 2, plots=False)
    assert not any(r.get("phase") == "sft" for r in recs)
    cfg_text = (tmp_path / "rl" / "config.yaml").read_text()
    assert str(policy) in cfg_text
    del model


def test_bad_override_exits_2_with_a_suggestion(capsys):
    assert main(["train", "trainer.totl_steps=3"]) == 2
    assert "Did you mean trainer.total_steps" in capsys.readouterr().err
    assert main(["sft", "trainer.totl_steps=3"]) == 2
    assert "Did you mean trainer.total_steps" in capsys.readouterr().err


def test_nan_loss_aborts_after_max_bad_steps(tmp_path, monkeypatch, capsys):
    from arborl.algos.policy_loss import POLICY_LOSSES, PolicyLoss, ppo_clip

    def nan_loss(*args, **kwargs):
        loss, stats = ppo_clip(*args, **kwargs)
        return loss * float("nan"), stats

    # the loss the algorithm record names (algo.loss=ppo_clip), made NaN for this test
    monkeypatch.setitem(POLICY_LOSSES._entries, "ppo_clip", PolicyLoss("ppo_clip", nan_loss))
    code = _train(
        tmp_path,
        "nan",
        "sft.enabled=false",
        "trainer.total_steps=5",
        "trainer.max_bad_steps=2",
        "algo.minibatch_size=1024",
        "trainer.plots=false",
    )
    assert code == 1
    assert "trainer.max_bad_steps=2" in capsys.readouterr().err
    recs = [r for r in read_metrics(tmp_path / "nan" / "metrics.jsonl") if "train/success" in r]
    assert [r["step"] for r in recs] == [1]  # step 2's second skip aborted the run
    # The aborted run's report shows what exists: one RL step, no summary.
    html = (tmp_path / "nan" / "report.html").read_text()
    assert '<span class="partial">partial</span>' in html and '"x": [1]' in html
