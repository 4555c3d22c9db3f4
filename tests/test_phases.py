"""`arborl.phases`: exclusive phase times that add up to the profile's wall, and the model
positions counted into the phase that was open when the forward ran."""

from __future__ import annotations

import time

import pytest
import torch

from arborl import phases
from arborl.models.loading import load_policy
from arborl.models.lora import apply_lora
from arborl.models.scoring import cache_kwarg
from arborl.train.runlog import PhaseTimer


def test_inner_phases_are_taken_out_of_the_outer_and_all_add_up_to_the_wall():
    timer = PhaseTimer()
    with phases.Profile() as prof:
        time.sleep(0.01)  # no phase open: OUTSIDE
        with timer.phase("rollout"):  # the trainer's timer marks the same phase
            time.sleep(0.01)
            with phases.phase("env"):
                time.sleep(0.02)
            with phases.phase("env"):  # a phase entered twice sums
                time.sleep(0.02)
    assert set(prof.seconds) == {phases.OUTSIDE, "rollout", "env"}
    assert prof.seconds["env"] >= 0.04
    assert prof.seconds["rollout"] >= 0.01
    assert prof.seconds[phases.OUTSIDE] >= 0.01
    # exclusive: rollout's own time only, while the trainer's metric is inclusive
    inclusive = timer.metrics()["time/rollout_s"]
    assert prof.seconds["rollout"] + prof.seconds["env"] == pytest.approx(inclusive, abs=1e-3)
    assert sum(prof.seconds.values()) == pytest.approx(prof.wall, abs=1e-9)


def test_nothing_is_recorded_without_an_active_profile_and_one_at_a_time():
    with phases.phase("env"):
        assert phases.active() is None
    with phases.Profile() as prof:
        with pytest.raises(RuntimeError, match="already active"):
            phases.Profile().__enter__()
    assert phases.active() is None and not prof.tokens


def test_watched_model_positions_are_counted_into_the_open_phase():
    model, _ = load_policy("tiny-0.1m")
    model = apply_lora(model, r=4, alpha=8, seed=0)  # hooks reach through the LoRA wrapper
    handles = phases.watch_model(model)
    ids = torch.tensor([[0, 5, 6, 7, 8], [9, 10, 11, 12, 13]])  # (2, 5), row 0 left-padded
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad(), phases.Profile() as prof:
        model(input_ids=ids, attention_mask=mask)  # no phase: OUTSIDE
        with phases.phase("score"):
            out = model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
            # 3 new positions on the cache: the mask covers 5 cached + 3 new columns
            new_mask = torch.cat([mask, torch.tensor([[1, 1, 0], [1, 1, 1]])], 1)  # (2, 8)
            cache = {cache_kwarg(model.get_base_model()): out.past_key_values}
            model(input_ids=ids[:, :3], attention_mask=new_mask, **cache)
    for h in handles:
        h.remove()
    assert prof.tokens[phases.OUTSIDE] == {"positions": 10, "real": 9, "head": 10, "forwards": 1}
    # 10 + 6 decoder positions, 9 + 5 real; the head ran on 2 (logits_to_keep=1) + 6
    assert prof.tokens["score"] == {"positions": 16, "real": 14, "head": 8, "forwards": 2}
