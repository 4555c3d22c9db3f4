"""The held-out evaluation of an agent program (issue 50 #10): an episode whose reward is
not a sound number (NaN here) is an env error there as in training, and the mean return
stays a number."""

import math

import pytest

from arborl.generation import HFBackend
from arborl.models import load_policy
from arborl.train.agent_eval import evaluate_agent_share
from arborl.train.config import load_train_config


@pytest.mark.fault("out-of-range reward")
def test_nan_rewards_are_env_errors_in_the_evaluation(tmp_path):
    cfg = load_train_config([
        "env.id=arborl/ToolQA-v0", "model.name_or_path=tiny-0.1m", "rollout.mode=program",
        "agent_program.fn=tests.rollout._agents:nan_agent", "rollout.max_new_tokens=4",
        f"trainer.output_dir={tmp_path}",
    ])  # fmt: skip
    model, tok = load_policy("tiny-0.1m", seed=0)
    out = evaluate_agent_share(HFBackend(model.eval(), tok), tok, cfg, [0, 1, 2, 3], 7)
    # episodes 1 and 3 return NaN: before, env_errors 0 and mean_return NaN (null in logs)
    assert out["env_errors"] == 2.0 and out["episodes"] == 4.0
    assert math.isfinite(out["mean_return"]) and out["mean_return"] == pytest.approx(0.5)
    assert [out["outcomes"][s] for s in range(4)] == [1.0, 0.0, 1.0, 0.0]
