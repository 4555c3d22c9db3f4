"""KL estimators between the policy and a reference, and the KL coefficient controllers.

Per-token estimators of KL(pi || pi_ref) from sampled log-probs (Schulman, "Approximating
KL divergence"), with d = ref_logp - logp:

- "k1": logp - ref_logp = -d (unbiased, high variance, can be negative).
- "abs": |logp - ref_logp|.
- "k2": 0.5 d^2 (low variance, biased).
- "k3": exp(d) - d - 1 (unbiased and >= 0; verl's "low_var_kl"). d is clamped to +-20
  and the result to [-10, 10], as in verl, so one outlier token cannot blow up the loss.
- "k3+": the value of k3 with the gradient of k2 (verl's straight-through variant).

verl's names "kl", "mse" and "low_var_kl" are accepted as aliases of k1, k2 and k3. Use
the estimate as a reward penalty (`kl_penalized_rewards`, detached) or as a loss term
(aggregate it with `arborl.algos.aggregate`).

Controllers set the penalty coefficient: `FixedKLController` keeps it, and
`AdaptiveKLController` follows the PPO paper (Ziegler et al. 2019): with
err = clip(kl / target_kl - 1, -0.2, 0.2), coef *= 1 + err * n_steps / horizon.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from arborl.algos.masked import masked_select_zero
from arborl.registry import Registry

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


def _abs(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return (logp - ref_logp).abs()


def _k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp) ** 2


def _k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    d = torch.clamp(ref_logp - logp, -20.0, 20.0)
    return torch.clamp(torch.exp(d) - d - 1.0, -10.0, 10.0)


def _k3_straight_through(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    k2 = _k2(logp, ref_logp)
    return k2 - k2.detach() + _k3(logp, ref_logp).detach()


KL_ESTIMATORS: Registry[KLFn] = Registry("kl kind")
for _name, _fn in (
    ("k1", _k1),
    ("abs", _abs),
    ("k2", _k2),
    ("k3", _k3),
    ("k3+", _k3_straight_through),
    ("kl", _k1),
    ("mse", _k2),
    ("low_var_kl", _k3),
):
    KL_ESTIMATORS.register(_name, _fn)
"""Per-token KL estimators by name (aliases included); see the module docstring."""


def get_kl_estimator(name: str) -> KLFn:
    """The estimator called `name`; raises listing the known names."""
    return KL_ESTIMATORS.get(name)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL estimate of the policy against the reference, same shape as `logp`.

    logp, ref_logp: (B, T) log-probs of the sampled tokens.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} must match"
        )
    return get_kl_estimator(kind)(logp, ref_logp)


@torch.no_grad()
def kl_penalized_rewards(
    rewards: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
    kind: str = "k1",
) -> tuple[torch.Tensor, torch.Tensor]:
    """In-reward KL: `(rewards - coef * kl * mask, mean kl per sequence (B,))`.

    All inputs (B, T). The mean KL per sequence (over valid tokens) is what a controller's
    `update` takes, averaged over the batch.
    """
    mask_f = mask.to(rewards.dtype)
    kl = masked_select_zero(kl_penalty(logp, ref_logp, kind) * mask_f, mask_f)  # (B, T)
    seq_kl = kl.sum(-1) / mask_f.sum(-1).clamp(min=1)  # (B,)
    return rewards - coef * kl, seq_kl


class FixedKLController:
    """A constant KL coefficient; `update` does nothing."""

    def __init__(self, coef: float) -> None:
        if coef < 0:
            raise ValueError(f"coef={coef} must be >= 0 (0 disables the KL penalty)")
        self.value = float(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op, so fixed and adaptive controllers are interchangeable."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """KL coefficient that tracks a target KL (Ziegler et al. 2019, as in verl)."""

    def __init__(self, init_coef: float, target_kl: float, horizon: float) -> None:
        if init_coef < 0:
            raise ValueError(f"init_coef={init_coef} must be >= 0")
        if target_kl <= 0:
            raise ValueError(f"target_kl={target_kl} must be > 0 (e.g. 0.1)")
        if horizon <= 0:
            raise ValueError(f"horizon={horizon} must be > 0 (e.g. 10000 samples)")
        self.value = float(init_coef)
        self.target_kl = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """coef *= 1 + clip(current_kl / target_kl - 1, -0.2, 0.2) * n_steps / horizon.

        n_steps: samples (or steps) since the last update, e.g. the batch size.
        """
        err = min(max(float(current_kl) / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + err * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


KL_CONTROLLERS: Registry[type] = Registry("kl controller")
KL_CONTROLLERS.register("fixed", FixedKLController)
KL_CONTROLLERS.register("adaptive", AdaptiveKLController)
"""KL controller classes by name."""


def make_kl_controller(
    kind: str, coef: float, target_kl: float = 0.1, horizon: float = 10000
) -> FixedKLController | AdaptiveKLController:
    """Build the controller called `kind` ("fixed" or "adaptive") starting at `coef`."""
    cls = KL_CONTROLLERS.get(kind)
    if cls is FixedKLController:
        return FixedKLController(coef)
    return cls(coef, target_kl, horizon)
