"""The update's micro-batch token budget (`arborl.train.memory`): measured per model, sized
to the memory free, the same across small changes in it, and a set value kept as given."""

import logging

import pytest
import torch

from arborl.models import apply_lora, load_policy
from arborl.train import memory
from arborl.train.memory import (
    activation_bytes_per_token,
    budget_for,
    resolve_micro_batch_tokens,
)

GIB, MIB = 2**30, 2**20


def test_budget_is_the_largest_power_of_two_whose_peak_fits_half_the_free_memory():
    # 1 MiB saved a token peaks at 2 MiB a token; half of 8 GiB is 4096 MiB -> 2048 tokens.
    assert budget_for(1 * MIB, 8 * GIB) == 2048
    # 9 GiB free: 4608 MiB / 2 MiB = 2304 tokens fit -> still 2048 (a power of two).
    assert budget_for(1 * MIB, 9 * GIB) == 2048
    # Two processes on the same memory: each gets half -> 1024.
    assert budget_for(1 * MIB, 8 * GIB, share=2) == 1024
    # A tiny model never goes above the cap, which was the fixed default.
    assert budget_for(0.013 * MIB, 8 * GIB) == memory.CAP == 16384
    # Nothing fits: the floor (a row longer than it still runs, alone).
    assert budget_for(1 * GIB, 1 * GIB) == memory.FLOOR


def test_activation_memory_grows_with_the_model_and_leaves_rng_and_mode_alone():
    small, _ = load_policy("tiny-0.1m")
    big, _ = load_policy("tiny-1m")
    small.eval()
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    per_small = activation_bytes_per_token(small)
    assert torch.equal(torch.rand(3), expected)  # the probe drew nothing from torch's RNG
    assert not small.training  # and left eval mode as it found it
    per_big = activation_bytes_per_token(big)
    assert 0 < per_small < per_big
    # The same model measures the same: the budget does not wander between runs.
    assert activation_bytes_per_token(small) == per_small


def test_a_set_budget_is_kept_and_warned_about_when_it_looks_too_big(monkeypatch, caplog):
    model, _ = load_policy("tiny-0.1m")
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device: 1 * MIB)
    with caplog.at_level(logging.INFO, logger="arborl"):
        assert resolve_micro_batch_tokens(model, 16384) == 16384
        assert resolve_micro_batch_tokens(model, None) < 16384  # sized to 1 MiB free
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "algo.micro_batch_tokens=16384" in warning[0]
    assert "leave it unset" in warning[0]


@pytest.mark.slow
def test_smollm2_would_not_fit_the_old_fixed_budget_on_a_24_gib_machine():
    """The run this guards against: SmolLM2 with LoRA on BabyAI was killed by the kernel in
    its first update (24.3 GiB resident) with the fixed 16,384-token budget."""
    model, _ = load_policy("smollm2-135m-instruct")
    model = apply_lora(model, r=16, alpha=32)
    per_token = activation_bytes_per_token(model)
    # Measured 0.91 MiB a token (float32, 30 layers of width 576, SDPA attention).
    assert 0.5 * MIB < per_token < 2 * MIB, per_token / MIB
    assert per_token * 16384 > 8 * GIB  # the old budget's saved activations alone
    assert budget_for(per_token, 22 * GIB) <= 4096


def test_the_floor_is_the_configs_own_minimum():
    from dataclasses import fields

    from arborl.train.config import AlgoConfig

    (field,) = [f for f in fields(AlgoConfig) if f.name == "micro_batch_tokens"]
    assert memory.FLOOR == field.metadata["min"]  # a budget the config itself would accept
