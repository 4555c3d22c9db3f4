"""verl#7244's question for arborl's step view: when the policy decides when an episode
ends, is the step-row policy gradient still unbiased?

A two-decision env, enumerated exactly: at turn 0 and turn 1 the policy stops with
probability sigmoid(theta_k), turn 2 always ends. Every turn pays 0.5 (an intermediate
reward) and stopping at turn 1 pays 1 more. Groups of G=2 episodes, RLOO advantages
without std scaling (`algo=rloo`, `norm_by_std=false`): A_i = R_i - R_j, a baseline that
does not depend on episode i, so the textbook estimator (1/n) sum_i A_i sum_t
grad log pi(a_t) has expectation exactly grad J. The test takes the expectation of each
step-view variant over all 9 group outcomes, with arborl's own advantages
(`compute_advantages`) and row weights (`episode_lengths`), and the update's row mean
(`loss_agg` seq-mean-token-mean: one action "token" per row, mean over rows).
"""

import itertools

import numpy as np
import torch

from arborl.data import Batch
from arborl.train.advantages import compute_advantages, episode_lengths
from arborl.train.config import AlgoConfig

THETA = torch.tensor([-2.0, 2.0], dtype=torch.float64, requires_grad=True)
LENGTHS = (1, 2, 3)


def _probs(theta):
    s0, s1 = torch.sigmoid(theta[0]), torch.sigmoid(theta[1])
    return {1: s0, 2: (1 - s0) * s1, 3: (1 - s0) * (1 - s1)}


def _return(length: int) -> float:
    return 0.5 * length + (1.0 if length == 2 else 0.0)


def _scores(length: int, theta) -> list[torch.Tensor]:
    """d log pi(a_t) / d theta of each turn's action."""
    s = torch.sigmoid(theta.detach())
    out = []
    for t in range(length):
        g = torch.zeros(2, dtype=torch.float64)
        if t < 2:
            g[t] = (1 - s[t]) if t == length - 1 else -s[t]  # stop, or continue
        out.append(g)
    return out


def _step_rows(lengths):
    rows = [(i, t) for i, n in enumerate(lengths) for t in range(n)]
    batch = Batch({"x": torch.zeros(len(rows))})
    batch.meta["traj_id"] = np.array([f"t{i}" for i, _ in rows])
    batch.meta["step"] = np.array([t for _, t in rows])
    batch.meta["group_id"] = np.array([0] * len(rows))
    rewards = torch.tensor([0.5 + (1.0 if (lengths[i] == 2 and t == 1) else 0.0) for i, t in rows])
    return batch, rewards, rows


def _expected(weighting: str) -> torch.Tensor:
    algo = AlgoConfig(name="rloo", norm_by_std=False)
    p = _probs(THETA.detach())
    total = torch.zeros(2, dtype=torch.float64)
    for lengths in itertools.product(LENGTHS, repeat=2):
        batch, rewards, rows = _step_rows(lengths)
        adv = compute_advantages(batch, rewards, algo)[0].double()
        scores = [_scores(n, THETA) for n in lengths]
        grad = torch.stack([scores[i][t] for i, t in rows])  # (R, 2)
        if weighting == "episode":  # algo.episode_weighting=true (default)
            w = 1.0 / episode_lengths(batch).double()
            g = (w / w.mean() * adv)[:, None].mul(grad).mean(0)
        elif weighting == "rows":  # algo.episode_weighting=false
            g = (adv[:, None] * grad).mean(0)
        else:  # "sum": sum over each episode's turns, mean over episodes
            g = (adv[:, None] * grad).sum(0) / len(lengths)
        total += p[lengths[0]] * p[lengths[1]] * g
    return total


def _true_gradient() -> torch.Tensor:
    p = _probs(THETA)
    j = sum(p[n] * _return(n) for n in LENGTHS)
    return torch.autograd.grad(j, THETA)[0]


def test_summing_each_episodes_turns_is_unbiased():
    torch.testing.assert_close(_expected("sum"), _true_gradient())


def test_step_row_means_are_biased_when_the_policy_ends_the_episode():
    """Both row-mean forms divide by a number the policy controls: the episode's own
    length (episode_weighting, the default) or the batch's row count. Their expectation
    is not a positive multiple of grad J: the two components shrink by different
    factors (measured at this theta: episode 0.94 vs 0.41, rows 0.65 vs 0.47)."""
    true = _true_gradient()
    for weighting in ("episode", "rows"):
        scale = _expected(weighting) / true  # (2,) per-parameter shrink factors
        assert float(scale.max() / scale.min()) > 1.3, (weighting, scale)
