"""GiGPO over step rows: a hand-worked example, the per-trajectory episode baseline,
singleton anchors, order invariance and a brute-force reference."""

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arborl.algos import gigpo

# Group 0 has two trajectories that pass through the same states s0, s1; gamma = 0.5.
#   A (long, wins): s0 -r=0-> s1 -r=0-> s2 -r=1-> goal   returns R = (0.25, 0.5, 1), total 1
#   B (short, fails): s0 -r=0-> s1 -r=0-> (truncated)    returns R = (0, 0), total 0
# Group 1 has one trajectory C with a single step from a state also called s0, reward 5.
# Rows come shuffled.
ROWS = [
    # (traj, step, group, anchor, reward)
    ("B", 1, 0, "s1", 0.0),
    ("A", 2, 0, "s2", 1.0),
    ("C", 0, 1, "s0", 5.0),
    ("A", 0, 0, "s0", 0.0),
    ("B", 0, 0, "s0", 0.0),
    ("A", 1, 0, "s1", 0.0),
]


def _run(rows, **kw):
    traj, step, group, anchor, reward = zip(*rows)
    return gigpo(list(reward), list(traj), list(step), list(group), list(anchor), **kw)


def test_gigpo_hand_example_mean_norm():
    out = _run(ROWS, gamma=0.5, omega=1.0, norm_by_std=False)
    # Episode level, over trajectories of group 0: mean(1, 0) = 0.5 -> A +0.5, B -0.5.
    #   C is alone in group 1 -> 0.
    # Step level within group 0: s0 {A: 0.25, B: 0} mean 0.125 -> A +0.125, B -0.125;
    #   s1 {A: 0.5, B: 0} mean 0.25 -> +/-0.25; s2 {A} singleton -> 0.
    #   (1, s0) holds only C: singleton -> 0 (group 0's s0 is a different anchor group).
    # rows: B1, A2, C0, A0, B0, A1
    torch.testing.assert_close(out.step_returns, torch.tensor([0.0, 1.0, 5.0, 0.25, 0.0, 0.5]))
    torch.testing.assert_close(out.episode_adv, torch.tensor([-0.5, 0.5, 0.0, 0.5, -0.5, 0.5]))
    torch.testing.assert_close(out.step_adv, torch.tensor([-0.25, 0.0, 0.0, 0.125, -0.125, 0.25]))
    torch.testing.assert_close(out.advantages, torch.tensor([-0.75, 0.5, 0.0, 0.625, -0.625, 0.75]))
    # anchor groups: (0,s0) x2, (0,s1) x2, (0,s2), (1,s0) -> 4 groups, 4 of 6 steps shared
    assert out.stats["num_anchor_groups"] == 4
    assert out.stats["num_trajectories"] == 3
    assert out.stats["shared_anchor_frac"] == pytest.approx(4 / 6)


def test_gigpo_hand_example_std_norm_and_omega():
    out = _run(ROWS, gamma=0.5, omega=0.5, norm_by_std=True, eps=0.0)
    # Episode: (1, 0) has unbiased std 0.70711 -> +/-0.70711.
    # Step: s0 (0.25, 0) std 0.17678 -> +/-0.70711; s1 (0.5, 0) -> +/-0.70711.
    # advantage = episode + 0.5 * step, e.g. A at s0: 0.70711 + 0.35355 = 1.06066
    a = 1 / math.sqrt(2)
    torch.testing.assert_close(out.step_adv, torch.tensor([-a, 0.0, 0.0, a, -a, a]))
    torch.testing.assert_close(
        out.advantages,
        torch.tensor([-1.5 * a, a, 0.0, 1.5 * a, -1.5 * a, 1.5 * a]),
    )


def test_long_episode_does_not_weigh_more_in_the_episode_baseline():
    # Group of two: L has 10 steps and return 1, S has 1 step and return 0. Per trajectory
    # the mean is 0.5, so L gets +0.5 and S -0.5. A mean over step rows would be
    # (10*1 + 0)/11 = 0.909 and give L only +0.091.
    rows = [("L", t, 0, f"l{t}", 1.0 if t == 9 else 0.0) for t in range(10)]
    rows.append(("S", 0, 0, "s", 0.0))
    out = _run(rows, gamma=0.9, omega=1.0, norm_by_std=False)
    assert torch.allclose(out.episode_adv[:10], torch.tensor(0.5))
    assert float(out.episode_adv[10]) == pytest.approx(-0.5)
    # every anchor is unique, so every step advantage is 0
    assert torch.equal(out.step_adv, torch.zeros(11))
    assert out.stats["shared_anchor_frac"] == 0.0


def test_gigpo_errors_name_the_problem():
    with pytest.raises(ValueError, match="occurs twice in trajectory 'A'"):
        _run([("A", 0, 0, "s", 1.0), ("A", 0, 0, "t", 0.0)])
    with pytest.raises(ValueError, match="more than one group"):
        _run([("A", 0, 0, "s", 1.0), ("A", 1, 1, "t", 0.0)])
    with pytest.raises(ValueError, match="step_ids must be 2 integers"):
        gigpo([1.0, 0.0], ["A", "A"], [0.0, 1.0], [0, 0], ["s", "t"])
    with pytest.raises(TypeError, match="not hashable"):
        gigpo([1.0, 0.0], ["A", "A"], [0, 1], [0, 0], [["s"], ["t"]])


def _reference(rows, gamma, omega, norm_by_std, eps=1e-6):
    """Brute force with dicts and explicit loops."""
    by_traj = {}
    for traj, step, _, _, reward in rows:
        by_traj.setdefault(traj, []).append((step, reward))
    ret, total = {}, {}
    for traj, steps in by_traj.items():
        steps.sort()
        total[traj] = sum(r for _, r in steps)
        for i, (step, _) in enumerate(steps):
            ret[(traj, step)] = sum(gamma ** (k - i) * steps[k][1] for k in range(i, len(steps)))

    def norm(x, pool):
        if len(pool) < 2:
            return 0.0
        mean = sum(pool) / len(pool)
        std = math.sqrt(sum((p - mean) ** 2 for p in pool) / (len(pool) - 1))
        return (x - mean) / (std + eps) if norm_by_std else x - mean

    traj_group = {traj: group for traj, _, group, _, _ in rows}
    out = []
    for traj, step, group, anchor, _ in rows:
        pool_e = [total[t] for t, g in traj_group.items() if g == group]
        pool_s = [ret[(t, s)] for t, s, g, a, _ in rows if g == group and a == anchor]
        out.append(norm(total[traj], pool_e) + omega * norm(ret[(traj, step)], pool_s))
    return out


def _random_rows(seed, num_traj, max_len):
    rng = random.Random(seed)
    rows = []
    for t in range(num_traj):
        group = rng.randrange(2)
        for s in range(rng.randint(1, max_len)):
            rows.append((f"t{t}", s, group, rng.randrange(3), float(rng.randint(-2, 2))))
    rng.shuffle(rows)
    return rows


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 10_000),
    st.integers(1, 6),
    st.integers(1, 5),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.booleans(),
)
def test_gigpo_matches_brute_force(seed, num_traj, max_len, gamma, norm_by_std):
    rows = _random_rows(seed, num_traj, max_len)
    out = _run(rows, gamma=gamma, omega=0.7, norm_by_std=norm_by_std)
    expected = torch.tensor(_reference(rows, gamma, 0.7, norm_by_std))
    torch.testing.assert_close(out.advantages, expected, atol=1e-4, rtol=1e-4)
    # order invariance: reversing the rows reverses the output
    rev = _run(rows[::-1], gamma=gamma, omega=0.7, norm_by_std=norm_by_std)
    torch.testing.assert_close(rev.advantages, out.advantages.flip(0))
