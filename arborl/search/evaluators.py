"""Evaluators: scores of nodes, from what the env returned only (see `base.Evaluator`).

- `FunctionEvaluator(fn)`: any `fn(view) -> float` (a user heuristic).
- `heuristic_evaluator(env_id)`: the env's own search heuristic, which its registration
  names (`register(..., heuristic="module:function")`; `HEURISTICS` maps env id to it),
  optionally flipped with probability `noise` (seeded) to model an imperfect judge. Each
  lives beside its game in `arborl.envs.builtin` and reads the *observation text* the
  agent sees, never the task dict:
    Game24 / Countdown (`countdown_value`): 1.0 if the numbers shown can still reach the
    target shown, else 0.0 (the ToT paper's "sure/impossible" judgement, computed exactly).
    Maze (`maze_value`): 1 / (1 + d), d the BFS distance from A to G on the grid shown (0
    if cut off).
    Sokoban (`sokoban_value`): 1 / (1 + sum of box-to-nearest-target Manhattan distances
    + player-to-box distance - 1); 0 for a box stuck in a corner off target (a dead end).
- `RolloutEvaluator`: the discounted return of `num_rollouts` proposer rollouts from the
  node (through the search context, so the steps are charged to `max_nodes`).
- `PolicyJudgeEvaluator`: the policy judging itself through a prompt: P(yes) /
  (P(yes) + P(no)) for the next token after "<state> Can this still be solved?".
- `ValueModelEvaluator`: an `arborl.models.ValueModel` critic's value of the node's prompt.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from arborl.envs import EnvSpec, registered_ids, spec
from arborl.search.base import NodeView, node_seed


class FunctionEvaluator:
    """`fn(view) -> float` per node."""

    uses_model = False

    def __init__(self, fn: Callable[[NodeView], float], name: str = "function") -> None:
        self.fn, self.name = fn, name

    def score(self, views: Sequence[NodeView], *, seed: int) -> list[float]:
        return [float(self.fn(v)) for v in views]


# --- env heuristics (each env owns its own; found through the env registry) ---------------
class _RegisteredHeuristics(Mapping[str, Callable[[NodeView], float]]):
    """Env id -> the search heuristic its registration names (`EnvSpec.heuristic`), read
    live from the env registry, so an env registered later (or a plug-in's) is included."""

    @staticmethod
    def _spec(env_id: object) -> EnvSpec | None:
        try:
            return spec(env_id) if isinstance(env_id, str) else None
        except KeyError:
            return None

    def __contains__(self, env_id: object) -> bool:
        s = self._spec(env_id)
        return s is not None and s.heuristic is not None

    def __getitem__(self, env_id: str) -> Callable[[NodeView], float]:
        s = self._spec(env_id)
        fn = s.load_heuristic() if s is not None else None
        if fn is None:
            raise KeyError(env_id)
        return fn

    def __iter__(self) -> Iterator[str]:
        return iter([i for i in registered_ids() if spec(i).heuristic is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)


HEURISTICS: Mapping[str, Callable[[NodeView], float]] = _RegisteredHeuristics()
"""Env id -> its search heuristic of the observation (from the env registry)."""


class HeuristicEvaluator:
    """An env's search heuristic, optionally flipped with seeded noise."""

    uses_model = False

    def __init__(self, fn: Callable[[NodeView], float], noise: float = 0.0, name: str = "") -> None:
        if not 0 <= noise <= 1:
            raise ValueError(f"noise={noise!r} must be in [0, 1]")
        self.fn, self.noise, self.name = fn, noise, name or "heuristic"

    def score(self, views: Sequence[NodeView], *, seed: int) -> list[float]:
        out = []
        for v in views:
            s = float(self.fn(v))
            if self.noise and random.Random(node_seed(seed, v.path)).random() < self.noise:
                s = 1.0 - s  # a wrong judgement
            out.append(s)
        return out


def heuristic_evaluator(env_id: str, noise: float = 0.0) -> HeuristicEvaluator:
    """The search heuristic `env_id` registered (raises naming the envs that have one)."""
    if env_id not in HEURISTICS:
        why = ("its registration names no heuristic" if _RegisteredHeuristics._spec(env_id)
               else "no env is registered under that id")  # fmt: skip
        raise ValueError(
            f"no built-in heuristic evaluator for env {env_id!r}: {why}; envs with one: "
            f"{sorted(HEURISTICS)}. Pass --evaluator rollout (or judge), write a "
            "FunctionEvaluator, or register the env with heuristic='module:function'"
        )
    return HeuristicEvaluator(HEURISTICS[env_id], noise, name=f"heuristic:{env_id}")


# --- evaluators that need the search context or a model ------------------------------------
class RolloutEvaluator:
    """Mean discounted return of `num_rollouts` proposer rollouts of `max_steps` steps."""

    name = "rollout"
    uses_model = False
    needs_context = True

    def __init__(self, max_steps: int = 8, num_rollouts: int = 1) -> None:
        self.max_steps, self.num_rollouts = max_steps, num_rollouts

    def score(self, views: Sequence[NodeView], *, seed: int) -> list[float]:
        raise TypeError(
            "RolloutEvaluator plays the env from a node's own snapshot, so it only works "
            "inside a search (SearchContext.evaluate calls score_in)"
        )

    def score_in(self, ctx: Any, node_ids: Sequence[int]) -> list[float]:
        out = []
        for i in node_ids:
            vals = [ctx.rollout(i, self.max_steps)[0] for _ in range(self.num_rollouts)]
            out.append(sum(vals) / len(vals))
        return out


class PolicyJudgeEvaluator:
    """P(yes) for "can this still be solved?" under a causal LM (one forward per batch)."""

    name = "judge"
    uses_model = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        question: str = "\nCan this still be solved? Answer y or n: ",
        yes: str = "y",
        no: str = "n",
    ) -> None:
        self.model, self.tokenizer, self.question = model, tokenizer, question
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in (yes, no)]
        if any(len(i) != 1 for i in ids):
            raise ValueError(f"yes={yes!r} and no={no!r} must each be one token")
        self.yes_id, self.no_id = ids[0][0], ids[1][0]

    def score(self, views: Sequence[NodeView], *, seed: int) -> list[float]:
        import torch

        out = []
        with torch.no_grad():
            for v in views:
                text = v.observation + self.question
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
                logits = self.model(input_ids=torch.tensor([ids])).logits[0, -1]
                pair = torch.log_softmax(logits[[self.yes_id, self.no_id]].float(), -1)
                out.append(float(pair[0].exp()))
        return out


class ValueModelEvaluator:
    """A critic's value of the node's prompt (last position), from `LMProposer.prompt_ids`."""

    name = "value"
    uses_model = True

    def __init__(self, value_model: Any, prompt_fn: Callable[[NodeView], list[int]]) -> None:
        self.value_model, self.prompt_fn = value_model, prompt_fn

    def score(self, views: Sequence[NodeView], *, seed: int) -> list[float]:
        import torch

        out = []
        with torch.no_grad():
            for v in views:
                ids = torch.tensor([self.prompt_fn(v)])
                out.append(float(self.value_model(ids)[0, -1]))
        return out
