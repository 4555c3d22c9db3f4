"""The failure tally (issue 48 req 1): errored episodes per phase with the first reason,
the verdict of a run that learned nothing and the hint read from the reason, in every
rollout mode (here an env-mode run whose env workers all fail)."""

from __future__ import annotations

import torch

from arborl.data import Batch
from arborl.envs.pool import StepResult
from arborl.report.failures import errored_line, verdict_line
from arborl.train.config import load_train_config
from arborl.train.failures import FailureTally, hint_for, signal_rows
from arborl.train.rl import RLTrainer

OVERLONG = (
    "agent crashed: the agent raised BadRequestError: Error code: 400 - prompt[0] has 4077 "
    "tokens; the limit is 1023 (the model context) at agents.py:1325"
)


def test_hints_are_read_from_the_reason():
    assert "(4077 tokens for a 1023-token limit): use a model with a longer context" in hint_for(
        OVERLONG
    )
    assert "raise agent_program.timeout_s" in hint_for(
        "agent timeout: the agent ran past timeout_s=120"
    )
    assert "raise env.timeout_s" in hint_for("timeout: no reply within 5s")
    assert "return a reward of 0" in hint_for("agent crashed: the agent raised KeyError: 'x'")
    assert "agent_program.reward" in hint_for("agent no_reward: the agent returned NoneType")
    assert "reward.sources" in hint_for("non-finite task t turn 0: env reward nan")
    assert "check the env" in hint_for("worker crashed")


def test_tally_counts_phases_and_keeps_the_first_reason():
    t = FailureTally()
    t.add("before", 4, 1, OVERLONG)
    t.add("rl", 8, 8, "agent timeout: the agent ran past timeout_s=1")
    t.add("after", 4, 0, "")
    t.trained(0)
    out = t.report(steps=1)
    assert (out["total_errored"], out["total_episodes"]) == (9, 16)
    assert out["first_error"] == OVERLONG and out["verdict"] == "no_rows"
    assert "longer context" in out["hint"]  # read from the first error
    assert errored_line(out) == (
        f"9 of 16 episodes errored (before RL 1 of 4, RL 8 of 8, after RL 0 of 4; first error: "
        f"{OVERLONG})"
    )
    assert verdict_line(out).startswith("nothing was learned: the run trained on 0 rows")


def test_verdicts():
    every = FailureTally(episodes={"rl": 2}, errored={"rl": 2}, first_error="x", rows_trained=0)
    assert every.verdict(steps=1) == "all_errored"
    quiet = FailureTally(episodes={"rl": 2}, errored={"rl": 0}, rows_trained=0)
    out = quiet.report(steps=1)
    assert out["verdict"] == "no_rows" and "train/rows_with_signal 0" in out["hint"]
    assert errored_line(out) == ""  # nothing errored: no errored line, still a verdict
    learned = FailureTally(episodes={"rl": 2}, errored={"rl": 1}, first_error="x", rows_trained=3)
    assert learned.verdict(steps=1) == "" and verdict_line(learned.report(1)) == ""
    assert FailureTally(rows_trained=0).verdict(steps=0) == ""  # no RL step: nothing to train
    old = FailureTally.from_state(None)  # a checkpoint older than the tally
    old.trained(0)
    assert old.rows_trained is None and old.verdict(steps=3) == ""


def test_signal_rows_counts_rows_with_an_advantage():
    b = Batch({"adv": torch.tensor([0.0, 0.5, -1e-9, -0.2])})
    assert signal_rows(b) == 2 and signal_rows(b[torch.tensor([0, 2])]) == 0


class FailingPool:
    """An `EnvPool` whose every step reports a crashed worker."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        return self.inner[i]

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self, actions):
        results, done = self.inner.step(actions)
        for i in actions:
            results[i] = StepResult("", 0.0, False, False, {"env_error": "worker crashed"})
        return results, done


def test_an_env_mode_run_whose_rl_episodes_all_fail_learned_nothing(tmp_path):
    cfg = load_train_config([
        "model.name_or_path=tiny-0.1m", "sft.enabled=false", "rollout.num_tasks=2",
        "rollout.group_size=2", "rollout.max_turns=2", "rollout.max_new_tokens=4",
        "eval.num_episodes=2", "eval.every=0", "trainer.progress=false", "trainer.plots=false",
        "trainer.report=false", "trainer.total_steps=1", f"trainer.output_dir={tmp_path}",
        "trainer.name=r", "trainer.loggers=[]",
    ])  # fmt: skip
    trainer = RLTrainer(cfg)
    trainer.engine.pool = FailingPool(trainer.engine.pool)
    failures = trainer.fit()["failures"]
    assert failures["episodes"] == {"before": 2, "rl": 4, "after": 2}
    assert failures["errored"]["rl"] == 4 and failures["first_error"] == "worker crashed"
    assert failures["verdict"] == "no_rows" and failures["rows_trained"] == 0
    assert "check the env" in failures["hint"]
    assert "4 of 8 episodes errored" in (tmp_path / "r" / "run.log").read_text()
