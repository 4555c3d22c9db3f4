"""RAFT's won-episode mask and DAPO's informative-group mask, on numbers worked by hand."""

import torch

from arborl.algos.selection import mixed_groups, won_episodes


def test_won_episodes_marks_a_trajectory_with_any_won_row():
    # rows:      0      1      2     3     4      trajectory 0 = rows 0, 1 (won at its
    # traj:      0      0      1     2     2      last row 1), 1 = row 2 (lost), 2 = rows
    # row_won:   F      T      F     F     F      3, 4 (lost) -> [True, False, False]
    row_won = torch.tensor([False, True, False, False, False])
    traj = torch.tensor([0, 0, 1, 2, 2])
    assert won_episodes(row_won, traj, 3).tolist() == [True, False, False]
    assert won_episodes(
        torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.long), 2
    ).tolist() == [False, False]


def test_mixed_groups_keeps_groups_of_different_returns():
    # group "a": returns 1, 0 -> spread 1 > tolerance: kept;
    # group "b": returns 0.5, 0.5 -> spread 0: dropped;
    # group "c": returns 1 and 1 + 2^-23 (one float32 ulp at 1: rounding, not a
    # difference; the tolerance at magnitude 1 is EQUAL_ULPS x 2^-23 > 2^-23): dropped.
    # Two of three groups dropped -> share 2/3.
    scores = torch.tensor([1.0, 0.0, 0.5, 0.5, 1.0, 1.0 + 2**-23], dtype=torch.float64)
    groups = ["a", "a", "b", "b", "c", "c"]
    mask, dropped = mixed_groups(scores, groups)
    assert mask.tolist() == [True, True, False, False, False, False]
    assert abs(dropped - 2 / 3) < 1e-12
    # In float64 precision the one-ulp (float32) spread is a difference: group c kept.
    mask, dropped = mixed_groups(scores, groups, torch.float64)
    assert mask.tolist() == [True, True, False, False, True, True]
    assert abs(dropped - 1 / 3) < 1e-12
