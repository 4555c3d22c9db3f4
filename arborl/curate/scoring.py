"""Quality scorers: any callable that maps a batch of trajectories to one float each.

    class Scorer(Protocol):
        def __call__(self, trajectories: Sequence[Trajectory]) -> Sequence[float]: ...

Batched so a reward model scores many rows per forward pass. Scorers are found by name in
`SCORERS` (factories taking the config's `quality.kwargs`), or as `module:attr` naming a
scorer (or, when kwargs are given, a factory); a reward model from `arborl.rewards` or
anywhere else plugs in either way. Built-ins: `return` (the episode return), `won`
(1/0), `reward_model` (an `arborl rm train` reward model, `kwargs={path: DIR}`) and
`lm_logprob` (the mean log-probability a causal LM gives the assistant turns: a cheap
fluency score, higher is better).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from arborl.data import Trajectory
from arborl.registry import Registry, is_entry_point, load_entry_point


@runtime_checkable
class Scorer(Protocol):
    """Trajectories in, one float per trajectory out (higher is better)."""

    def __call__(self, trajectories: Sequence[Trajectory]) -> Sequence[float]: ...


SCORERS: Registry[Callable[..., Scorer]] = Registry(
    "quality.scorer",
    error=ValueError,
    message="{what}={name} is not known; use one of {known} or 'module:attr' naming a "
    "callable(trajectories) -> scores.{hint}",
)
"""Scorer factories by name: `SCORERS.get(name)(**kwargs)` builds a scorer."""


def register_scorer(name: str, factory: Callable[..., Scorer], overwrite: bool = False) -> None:
    """Make a scorer factory available as `quality.scorer=name`."""
    if not callable(factory):
        raise TypeError(f"scorer {name!r} must be a callable factory, got {factory!r}")
    if name in SCORERS and not overwrite:
        raise ValueError(f"scorer {name!r} is already registered; pass overwrite=True")
    SCORERS.register(name, factory)


def make_scorer(name: str, kwargs: dict[str, Any] | None = None) -> Scorer:
    """The scorer `name` (registered, or `module:attr`) built with `kwargs`."""
    kwargs = dict(kwargs or {})
    if name in SCORERS:
        return SCORERS.get(name)(**kwargs)
    if not is_entry_point(name):
        raise SCORERS.unknown(name)
    try:  # a user's scorer (or, given kwargs, its factory)
        obj = load_entry_point(name, "quality.scorer")
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{e}; quality.scorer cannot import it") from e
    return obj(**kwargs) if kwargs else obj


def score_all(scorer: Scorer, trajs: Sequence[Trajectory], batch_size: int) -> list[float]:
    """Scores of all `trajs`, `batch_size` per call, checked for length and type."""
    scores: list[float] = []
    for start in range(0, len(trajs), batch_size):
        chunk = trajs[start : start + batch_size]
        out = [float(s) for s in scorer(chunk)]
        if len(out) != len(chunk):
            raise ValueError(f"scorer returned {len(out)} scores for {len(chunk)} trajectories")
        scores.extend(out)
    return scores


# --- built-ins -------------------------------------------------------------------------
def _return_scorer() -> Scorer:
    return lambda trajs: [t.total_return for t in trajs]


def _won_scorer() -> Scorer:
    return lambda trajs: [float(t.won) for t in trajs]


class LMLogprobScorer:
    """Mean log-probability per assistant token under a causal LM, each turn scored given
    its observation (what the policy would have seen, minus memory)."""

    def __init__(self, model: str = "tiny-0.1m", seed: int = 0, max_tokens: int = 512) -> None:
        import torch

        from arborl.models import load_policy

        self.torch = torch
        self.model, self.tokenizer = load_policy(model, seed=seed)
        self.model.eval()
        self.max_tokens = max_tokens

    def _turn_logprobs(self, observation: str, response: str) -> list[float]:
        from arborl.models import token_logprobs

        enc = self.tokenizer
        prompt = enc.encode(observation, add_special_tokens=False)
        target = enc.encode(response, add_special_tokens=False)
        if not target:
            return []
        ids = (prompt + target)[-self.max_tokens :]
        n_target = min(len(target), len(ids) - 1)
        with self.torch.no_grad():
            lp = token_logprobs(self.model, self.torch.tensor([ids]))[0]  # (T-1,)
        return lp[-n_target:].tolist()

    def __call__(self, trajectories: Sequence[Trajectory]) -> list[float]:
        scores = []
        for t in trajectories:
            lps: list[float] = []
            for s in t.steps:
                lps += self._turn_logprobs(
                    s.observation, s.action if s.response is None else s.response
                )
            scores.append(sum(lps) / len(lps) if lps else float("-inf"))
        return scores


class RewardModelScorer:
    """Scores from an `arborl.rewards` reward model: a directory written by `arborl rm
    train` (or, for tests, a tiny preset with fresh weights). Rows without steps (task
    prompts) have nothing to score and get -inf."""

    def __init__(self, path: str, dtype: str = "float32", batch_size: int = 32) -> None:
        from arborl.rewards.reward_model import RewardModel

        self.rm = RewardModel.from_spec(path, dtype=dtype)
        self.rm.eval()
        self.batch_size = batch_size

    def __call__(self, trajectories: Sequence[Trajectory]) -> list[float]:
        import torch

        stepped = [t for t in trajectories if t.steps]
        with torch.no_grad():
            scores = iter(self.rm.score(stepped, self.batch_size) if stepped else [])
        return [float(next(scores)) if t.steps else float("-inf") for t in trajectories]


register_scorer("return", _return_scorer)
register_scorer("reward_model", RewardModelScorer)
register_scorer("won", _won_scorer)
register_scorer("lm_logprob", LMLogprobScorer)
