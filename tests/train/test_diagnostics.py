"""Per-step learning diagnostics on a hand-built step-view Batch (numbers by hand below).

Rows:  row traj step group won  adv    response tokens
        0   a    0    g0   yes   1.0    2
        1   a    1    g0   yes   1.0    3
        2   b    0    g0   no   -1.0    1
        3   c    0    g1   yes   0.0    4
        4   d    0    g1   yes   0.0    2
        5   e    0    g2   no    0.0    1
Groups: g0 = {a won (2 steps), b lost (1)} mixed; g1 = {c, d} all won; g2 = {e} all lost.
"""

import math

import numpy as np
import pytest
import torch

from arborl.data import Batch
from arborl.train.diagnostics import (
    advantage_diagnostics,
    group_diagnostics,
    train_token_diagnostics,
)


def _batch():
    tokens = [2, 3, 1, 4, 2, 1]
    resp = torch.zeros(6, 4)
    for i, t in enumerate(tokens):
        resp[i, :t] = 1
    meta = {
        "traj_id": np.array(["a", "a", "b", "c", "d", "e"]),
        "group_id": np.array(["g0", "g0", "g0", "g1", "g1", "g2"]),
        "step": np.array([0, 1, 0, 0, 0, 0]),
    }
    won = torch.tensor([True, True, False, True, True, False])
    b = Batch.from_dict({"response_mask": resp, "won": won}, meta, {"view": "step"})
    return b, torch.tensor([1.0, 1.0, -1.0, 0.0, 0.0, 0.0])


def test_advantage_diagnostics_by_hand():
    b, adv = _batch()
    d = advantage_diagnostics(b, adv)
    # mean = (1 + 1 - 1) / 6; unbiased var = (sum a^2 - 6 mean^2) / 5 = (3 - 1/6) / 5
    assert d["adv/mean"] == pytest.approx(1 / 6)
    assert d["adv/std"] == pytest.approx(math.sqrt((3 - 1 / 6) / 5))
    assert d["adv/abs_mean"] == pytest.approx(0.5)
    assert d["adv/rows_nonzero"] == pytest.approx(0.5)
    assert d["adv/groups_with_signal"] == pytest.approx(1 / 3)  # only g0


def test_group_diagnostics_by_hand():
    b, _ = _batch()
    d = group_diagnostics(b)
    assert d["rollout/groups_all_won"] == pytest.approx(1 / 3)  # g1
    assert d["rollout/groups_all_lost"] == pytest.approx(1 / 3)  # g2
    assert d["rollout/groups_mixed"] == pytest.approx(1 / 3)  # g0
    # group success rates (0.5, 1, 0): population std = sqrt(((0)^2 + .5^2 + .5^2) / 3)
    assert d["rollout/group_success_std"] == pytest.approx(math.sqrt(0.5 / 3))
    # episode lengths a=2, b=1, c=1, d=1, e=1
    assert d["rollout/len_mean"] == pytest.approx(6 / 5)
    assert d["rollout/len_group_min"] == 1.0 and d["rollout/len_group_max"] == 1.5
    assert d["rollout/len_won"] == pytest.approx(4 / 3)  # a, c, d
    assert d["rollout/len_lost"] == 1.0  # b, e
    assert group_diagnostics(b.select("response_mask")) == {}


def test_train_token_diagnostics_count_each_kept_token_once():
    b, adv = _batch()
    kept = b[adv.abs() > 0]  # rows 0-2: 2 + 3 + 1 tokens of 13
    d = train_token_diagnostics(b, kept)
    assert d == {"train/tokens": 6.0, "train/tokens_frac": pytest.approx(6 / 13)}
