"""Evaluators: scores of nodes, from what the env returned only (see `base.Evaluator`).

- `FunctionEvaluator(fn)`: any `fn(view) -> float` (a user heuristic).
- `heuristic_evaluator(env_id)`: the built-in heuristics below, by env id. Each reads the
  *observation text* the agent sees, never the task dict:
    Game24 / Countdown: 1.0 if the numbers shown can still reach the target shown, else
    0.0 (the ToT paper's "sure/impossible" judgement, computed exactly); `noise` flips it
    with that probability (seeded) to model an imperfect judge.
    Maze: 1 / (1 + d), d the BFS distance from A to G on the grid shown (0 if cut off).
    Sokoban: 1 / (1 + sum of box-to-nearest-target Manhattan distances + player-to-box
    distance - 1); 0 for a box stuck in a corner off target (a dead end).
- `RolloutEvaluator`: the discounted return of `num_rollouts` proposer rollouts from the
  node (through the search context, so the steps are charged to `max_nodes`).
- `PolicyJudgeEvaluator`: the policy judging itself through a prompt: P(yes) /
  (P(yes) + P(no)) for the next token after "<state> Can this still be solved?".
- `ValueModelEvaluator`: an `arborl.models.ValueModel` critic's value of the node's prompt.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from arborl.search.base import NodeView, node_seed

_NUMBERS_RE = re.compile(r"Numbers:\s*([\d ]+)\.\s*Target:\s*(\d+)")


class FunctionEvaluator:
    """`fn(view) -> float` per node."""

    uses_model = False

    def __init__(self, fn: Callable[[NodeView], float], name: str = "function") -> None:
        self.fn, self.name = fn, name

    def score(self, views: Sequence[NodeView], *, seed: int) -> list[float]:
        return [float(self.fn(v)) for v in views]


# --- built-in heuristics (observation text only) -------------------------------------------
def countdown_value(view: NodeView) -> float:
    """1.0 if the shown numbers can still make the shown target, else 0.0."""
    from arborl.envs.builtin.countdown import solve

    m = _NUMBERS_RE.search(view.observation)
    if m is None:
        return 0.0
    numbers = tuple(sorted(int(x) for x in m.group(1).split()))
    return 1.0 if solve(numbers, int(m.group(2))) is not None else 0.0


def _grid(view: NodeView) -> list[str]:
    lines = [ln for ln in view.observation.splitlines() if ln and set(ln) <= set("#._$*@+AG")]
    return lines


def maze_value(view: NodeView) -> float:
    """1 / (1 + BFS distance A -> G) on the grid shown; 0 when G cannot be reached."""
    from arborl.envs.builtin.maze import bfs_distances

    grid = _grid(view)
    cells = {(r, c): ch for r, row in enumerate(grid) for c, ch in enumerate(row)}
    free = {p for p, ch in cells.items() if ch in ".AG"}
    a = next((p for p, ch in cells.items() if ch == "A"), None)
    g = next((p for p, ch in cells.items() if ch == "G"), None)
    if a is None or g is None:
        return 1.0 if view.won else 0.0
    d = bfs_distances(free, a).get(g)
    return 0.0 if d is None else 1.0 / (1.0 + d)


def sokoban_value(view: NodeView) -> float:
    """Manhattan-distance heuristic on the room shown (0 for a cornered box off target)."""
    if view.won:
        return 1.0
    grid = _grid(view)
    cells = {(r, c): ch for r, row in enumerate(grid) for c, ch in enumerate(row)}
    walls = {p for p, ch in cells.items() if ch == "#"}
    targets = [p for p, ch in cells.items() if ch in ".*+"]
    boxes = [p for p, ch in cells.items() if ch in "$*"]
    player = next((p for p, ch in cells.items() if ch in "@+"), None)
    if not boxes or not targets or player is None:
        return 0.0
    for r, c in boxes:
        if (r, c) in targets:
            continue
        vert = (r - 1, c) in walls or (r + 1, c) in walls
        horiz = (r, c - 1) in walls or (r, c + 1) in walls
        if vert and horiz:
            return 0.0  # a box in a corner can never move again

    def dist(p, q):
        return abs(p[0] - q[0]) + abs(p[1] - q[1])

    h = sum(min(dist(b, t) for t in targets) for b in boxes)
    loose = [b for b in boxes if b not in targets] or boxes
    h += min(dist(player, b) for b in loose) - 1
    return 1.0 / (1.0 + max(0, h))


HEURISTICS: dict[str, Callable[[NodeView], float]] = {
    "arborl/Game24-v0": countdown_value,
    "arborl/Countdown-v0": countdown_value,
    "arborl/Maze-v0": maze_value,
    "arborl/Sokoban-v0": sokoban_value,
}
"""Env id -> built-in heuristic of the observation."""


class HeuristicEvaluator:
    """A built-in heuristic, optionally flipped/perturbed with seeded noise."""

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
    """The built-in heuristic for `env_id` (raises listing the envs that have one)."""
    if env_id not in HEURISTICS:
        raise ValueError(
            f"no built-in heuristic evaluator for env {env_id!r}; known: {sorted(HEURISTICS)}. "
            "Pass --evaluator rollout (or judge) or write a FunctionEvaluator"
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
