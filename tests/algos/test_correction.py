"""Rollout correction modes (`arborl.algos.correction`) against hand-worked cases, the
on-policy case (weights exactly 1), the mismatch metrics, and a mode registered from this
test module as an outside package would."""

import math
from types import SimpleNamespace

import pytest
import torch

from arborl.algos.correction import (
    CORRECTIONS,
    Correction,
    CorrectionOutput,
    get_correction,
    mismatch_metrics,
    register_correction,
)
from arborl.algos.policy_loss import get_policy_loss
from arborl.config import ConfigError
from arborl.train.config import load_train_config

PARAMS = SimpleNamespace(cap=2.0, veto_threshold=1.1)
LN2, LN3 = math.log(2.0), math.log(3.0)
# Row 0: tokens at log-ratio ln3, -ln2, and one padding slot (mask 0, a NaN there must not
# leak). Row 1: ln(1.05) twice. Row 2: no valid token at all.
LOG_RATIO = torch.tensor([[LN3, -LN2, float("nan")], [math.log(1.05)] * 2 + [0.0], [0.0] * 3])
MASK = torch.tensor([[1, 1, 0], [1, 1, 0], [0, 0, 0]])


def _weigh(name):
    return get_correction(name).weigh(LOG_RATIO, MASK, PARAMS)


def test_token_tis_caps_each_token():
    out = _weigh("token_tis")
    # rho = 3 -> capped at 2; 0.5 stays; 1.05 stays; padding 0
    expected = torch.tensor([[2.0, 0.5, 0.0], [1.05, 1.05, 0.0], [0.0] * 3])
    torch.testing.assert_close(out.weights, expected)
    assert out.truncated.tolist() == [[True, False, False], [False] * 3, [False] * 3]
    assert not out.masked.any()


def test_seq_tis_caps_the_product():
    out = _weigh("seq_tis")
    # row 0: 3 * 0.5 = 1.5 (under the cap); row 1: 1.05^2 = 1.1025
    expected = torch.tensor([[1.5, 1.5, 0.0], [1.1025, 1.1025, 0.0], [0.0] * 3])
    torch.testing.assert_close(out.weights, expected)
    assert not out.truncated.any()
    capped = get_correction("seq_tis").weigh(LOG_RATIO, MASK, SimpleNamespace(cap=1.25))
    # row 0: 1.5 -> 1.25 (truncated); row 1: 1.1025 stays
    torch.testing.assert_close(capped.weights[:, 0], torch.tensor([1.25, 1.1025, 0.0]))
    assert capped.truncated[:2, :2].tolist() == [[True, True], [False, False]]


def test_seq_mis_masks_sequences_over_the_cap():
    out = get_correction("seq_mis").weigh(LOG_RATIO, MASK, SimpleNamespace(cap=1.25))
    # row 0: 1.5 > 1.25 -> the whole sequence masked; row 1: 1.1025 kept as its weight
    torch.testing.assert_close(
        out.weights, torch.tensor([[0.0, 0.0, 0.0], [1.1025, 1.1025, 0.0], [0.0] * 3])
    )
    assert out.masked.tolist() == [[True, True, False], [False] * 3, [False] * 3]
    assert not out.truncated.any()


def test_geo_veto_on_the_geometric_mean():
    out = _weigh("geo_veto")
    # row 0: geometric mean sqrt(3 * 0.5) = 1.2247 > 1.1 -> vetoed; row 1: 1.05 in
    # [1/1.1, 1.1] -> weight 1
    torch.testing.assert_close(
        out.weights, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0] * 3])
    )
    assert out.masked.tolist() == [[True, True, False], [False] * 3, [False] * 3]
    low = get_correction("geo_veto").weigh(-LOG_RATIO.nan_to_num(), MASK, PARAMS)
    assert low.masked[0, :2].all() and not low.masked[1].any()  # 1/1.2247 < 1/1.1: vetoed


@pytest.mark.parametrize("name", ["token_tis", "seq_tis", "seq_mis", "geo_veto"])
def test_on_policy_weights_are_exactly_one(name):
    """Same model, dtype and version: the sampler's log-probs are the trainer's, bit for
    bit, so every mode weighs each valid token by exactly 1 and masks nothing."""
    logp = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0] * 5])
    out = get_correction(name).weigh(logp - logp, mask, PARAMS)
    assert torch.equal(out.weights, mask.float())
    assert not out.truncated.any() and not out.masked.any()


def test_mismatch_metrics_by_hand():
    out = _weigh("token_tis")
    m = mismatch_metrics(LOG_RATIO, MASK, out)
    # valid log-ratios: ln3, -ln2, ln1.05, ln1.05 (4 tokens)
    lrs = [LN3, -LN2, math.log(1.05), math.log(1.05)]
    assert m["log_ratio_mean"] == pytest.approx(sum(lrs) / 4)
    assert m["log_ratio_abs_max"] == pytest.approx(LN3)
    # k3 = rho - 1 - log rho: (3-1-ln3) + (0.5-1+ln2) + 2 (1.05-1-ln1.05)
    k3 = (2 - LN3) + (-0.5 + LN2) + 2 * (0.05 - math.log(1.05))
    assert m["kl"] == pytest.approx(k3 / 4)
    assert m["tokens_truncated"] == pytest.approx(1 / 4)  # the ln3 token
    assert m["seqs_truncated"] == pytest.approx(1 / 2)  # row 0 of the 2 with tokens
    assert m["tokens_masked"] == 0.0 and m["seqs_masked"] == 0.0
    assert m["weight_mean"] == pytest.approx((2.0 + 0.5 + 1.05 + 1.05) / 4)
    assert set(mismatch_metrics(LOG_RATIO, MASK)) == {"kl", "log_ratio_mean", "log_ratio_abs_max"}


@pytest.mark.parametrize("loss", ["ppo_clip", "cispo"])
def test_weighing_the_advantage_weighs_each_token_loss(loss):
    """The update applies a correction as advantage (B,) x weight (B, T): every registered
    policy loss is positively homogeneous in A, so that is the token loss times the
    weight. Weights of 1 give the uncorrected loss bit for bit; a masked row keeps its
    place in the denominator (3 sequences, not 2)."""
    record = get_policy_loss(loss)
    algo = SimpleNamespace(clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    options = record.options() if record.options else None
    g = torch.Generator().manual_seed(1)
    logp, old = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    adv, mask = torch.tensor([0.7, -1.3, 0.4]), torch.ones(3, 4)

    def run(a, rows=slice(None)):
        out, _ = record.fn(
            logp[rows],
            old[rows],
            a,
            mask[rows],
            algo,
            options,
            agg="seq-mean-token-mean",
            max_len=None,
            num_tokens=None,
            num_seqs=None,
        )
        return out

    assert torch.equal(run(adv), run(adv[:, None] * torch.ones(3, 4)))
    w = torch.tensor([[0.0] * 4, [1.0] * 4, [1.0] * 4])  # row 0 masked by a correction
    torch.testing.assert_close(run(adv[:, None] * w), run(adv[1:], slice(1, None)) * 2 / 3)
    half = torch.full((3, 4), 0.5)
    torch.testing.assert_close(run(adv[:, None] * half), run(adv) * 0.5)


def _halve(log_ratio, mask, params):
    """A plug-in mode: every valid token weighs 0.5."""
    w = torch.where(mask.bool(), 0.5, 0.0)
    zero = torch.zeros_like(mask, dtype=torch.bool)
    return CorrectionOutput(w, zero, zero)


HALVE = Correction("halve", _halve, "token", "every token at half weight")


def test_an_outside_mode_registers_and_is_accepted_by_the_config():
    # by module:attr, unregistered (pytest may hold this module under another name)
    by_path = get_correction("tests.algos.test_correction:HALVE")
    assert by_path.name == "halve" and by_path.weigh(LOG_RATIO, MASK, PARAMS).weights[1, 0] == 0.5
    cfg = load_train_config(["algo.correction.mode=tests.algos.test_correction:HALVE"])
    assert cfg.algo.correction.mode == "tests.algos.test_correction:HALVE"
    register_correction(HALVE)
    try:
        out = get_correction("halve").weigh(LOG_RATIO, MASK, PARAMS)
        assert out.weights[0].tolist() == [0.5, 0.5, 0.0]
        assert load_train_config(["algo.correction.mode=halve"]).algo.correction.mode == "halve"
    finally:
        CORRECTIONS.unregister("halve")


def test_unknown_mode_and_contradiction_fail_at_load():
    with pytest.raises(ConfigError, match="algo.correction.mode.*geo_veto.*token_tis"):
        load_train_config(["algo.correction.mode=tis"])
    with pytest.raises(ConfigError, match="recompute_old_logp=false"):
        load_train_config(
            ["algo.correction.mode=seq_mis", "algo.correction.recompute_old_logp=false"]
        )
    with pytest.raises(ConfigError, match="algo.correction.cap"):
        load_train_config(["algo.correction.cap=0.5"])
