"""Reward shaping: potential-based terms and discounted returns of one episode.

Potential-based shaping (Ng, Harada & Russell 1999) adds F = gamma * phi(s') - phi(s)
to each reward. Over an episode s_0 ... s_T the discounted sum of F telescopes to
gamma^T phi(s_T) - phi(s_0), so it changes every policy's return by the same amount
and leaves the optimal policy unchanged. The potential of a terminal state is taken as
0 (`done`), as the theory requires; a truncated episode keeps phi(s_T).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from arborl.algos import discounted_returns


def potential_shaping(phi_s: Any, phi_next: Any, gamma: float, done: Any) -> np.ndarray:
    """gamma * phi(s') * (1 - done) - phi(s), elementwise over (N,) arrays (or scalars)."""
    phi_s = np.asarray(phi_s, dtype=np.float64)
    phi_next = np.asarray(phi_next, dtype=np.float64)
    done = np.asarray(done, dtype=np.float64)
    return gamma * phi_next * (1.0 - done) - phi_s


def episode_potential_shaping(
    states: Sequence[Any],
    phi: Callable[[Any], float],
    gamma: float,
    terminated: bool = True,
) -> np.ndarray:
    """Shaping terms (T,) for an episode given its T + 1 states s_0 ... s_T.

    `phi(state) -> float` is the user's potential, called once per state. The last
    transition uses phi(s_T) = 0 when `terminated` (the episode reached a terminal state)
    and the real phi(s_T) when it was truncated.
    """
    if len(states) < 2:
        raise ValueError(
            f"states has {len(states)} entries; pass s_0 ... s_T (T + 1 states for T steps)"
        )
    potentials = np.array([float(phi(s)) for s in states], dtype=np.float64)  # (T+1,)
    done = np.zeros(len(states) - 1)
    done[-1] = 1.0 if terminated else 0.0
    return potential_shaping(potentials[:-1], potentials[1:], gamma, done)


def discounted_cumulative_returns(rewards: Any, gamma: float) -> np.ndarray:
    """G_t = sum_{k>=t} gamma^(k-t) r_k for one episode's rewards (T,) -> (T,)."""
    r = torch.as_tensor(np.asarray(rewards, dtype=np.float64).reshape(1, -1))  # (1, T)
    return discounted_returns(r, torch.ones_like(r, dtype=torch.bool), gamma)[0].numpy()
