"""Discounted returns and GAE over (B, T) rows whose masked positions are skipped.

A multi-turn row interleaves model tokens (mask 1) with observation/tool tokens and padding
(mask 0). Following verl's `compute_gae_advantage_return`, the backward recursion only
advances on mask-1 positions: a masked position is treated as if it were not there, so the
next *valid* position supplies the bootstrap value, and the value after the last valid
position is 0 (the row is terminal). Rewards sitting on masked positions are ignored, so put
each reward on a valid token (usually the last token of the action). The same functions work
over steps (one row per episode, one column per step) as over tokens.
"""

from __future__ import annotations

import torch


def _check_rows(name_to_tensor: dict[str, torch.Tensor]) -> None:
    shapes = {name: tuple(t.shape) for name, t in name_to_tensor.items()}
    first = next(iter(shapes.values()))
    if len(first) != 2 or any(s != first for s in shapes.values()):
        raise ValueError(f"expected (B, T) tensors of one shape, got shapes {shapes}")


def _check_unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}={value} must lie in [0, 1]; 1 means no discounting")


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """R_t = r_t + gamma * R_next over valid positions; masked positions get 0.

    rewards: (B, T) float; mask: (B, T) bool/0-1; returns (B, T). `R_next` is the return at
    the next valid position of the row, 0 after the last one.
    """
    _check_rows({"rewards": rewards, "mask": mask})
    _check_unit("gamma", gamma)
    mask = mask.bool()
    zero = torch.zeros_like(rewards[:, 0])  # (B,)
    out = torch.zeros_like(rewards)  # (B, T)
    running = zero  # (B,)
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t]  # (B,); `where`, not a product, so junk at masked positions cannot leak
        candidate = rewards[:, t] + gamma * running
        running = torch.where(m, candidate, running)  # carry over masked positions
        out[:, t] = torch.where(m, candidate, zero)
    return out


@torch.no_grad()
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation; returns `(advantages, returns)`, both (B, T).

    delta_t = r_t + gamma * V_next - V_t and A_t = delta_t + gamma * lam * A_next, where
    `V_next`/`A_next` belong to the next valid position of the row (0 after the last one).
    `returns = advantages + values` on valid positions. Both are 0 where `mask` is 0. No
    whitening here: apply `masked_whiten` to the advantages if the recipe wants it.
    Computed under `no_grad`: advantages and returns are targets, not part of the graph.

    rewards, values: (B, T) float; mask: (B, T) bool/0-1.
    """
    _check_rows({"rewards": rewards, "values": values, "mask": mask})
    _check_unit("gamma", gamma)
    _check_unit("lam", lam)
    mask = mask.bool()
    values = values.to(rewards.dtype)
    zero = torch.zeros_like(rewards[:, 0])  # (B,)
    advantages = torch.zeros_like(rewards)  # (B, T)
    next_value, next_adv = zero, zero  # (B,), (B,)
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t]  # (B,)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        next_value = torch.where(m, values[:, t], next_value)
        next_adv = torch.where(m, adv, next_adv)
        advantages[:, t] = torch.where(m, adv, zero)
    returns = torch.where(mask, advantages + values, torch.zeros_like(values))
    return advantages, returns
