"""Synthetic envs with known optima for the search tests.

`TreeEnv`: a complete tree of branching `len(actions)` and depth `depth`; the state is
the path string (the observation shows it). Each leaf has a fixed reward; the episode
ends at a leaf with that reward and is won only at the unique best leaf. `best_below`
(the best leaf reward under a path) is the exact evaluator; with `values` a test sets
any other (e.g. deceptive) value per path.
"""

from __future__ import annotations

import itertools
import random

from arborl.envs.base import TextEnv
from arborl.search import FunctionEvaluator, FunctionProposer


class TreeEnv(TextEnv):
    env_id = "test/Tree-v0"
    _state_attrs = ("path",)

    def __init__(self, leaf_rewards: dict[str, float], actions: str = "abc", depth: int = 3):
        super().__init__(max_turns=depth + 1)
        self.leaf_rewards, self.acts, self.depth = leaf_rewards, actions, depth
        self.best = max(leaf_rewards.values())
        self.path = ""

    def _sample_task(self, rng, split):
        return {"tree": 0}

    def _task_id(self, task):
        return "tree"

    def _start(self, task):
        self.path = ""
        return "path="

    def _act(self, action):
        if action not in self.acts or len(self.path) >= self.depth:
            return f"path={self.path}", 0.0, False, False
        self.path += action
        if len(self.path) == self.depth:
            r = self.leaf_rewards[self.path]
            return f"path={self.path}", r, True, True
        return f"path={self.path}", 0.0, False, True

    def _won(self):
        return len(self.path) == self.depth and self.leaf_rewards[self.path] == self.best

    def _anchor(self):
        return self.path

    def _available_actions(self):
        return list(self.acts) if len(self.path) < self.depth else []

    def best_below(self, path: str) -> float:
        return max(r for leaf, r in self.leaf_rewards.items() if leaf.startswith(path))


def random_leaves(seed: int, actions: str = "abc", depth: int = 3) -> dict[str, float]:
    """Leaf rewards in [0, 0.9) with one unique best leaf of reward 1."""
    rng = random.Random(seed)
    leaves = ["".join(p) for p in itertools.product(actions, repeat=depth)]
    rewards = {leaf: round(rng.random() * 0.9, 3) for leaf in leaves}
    rewards[rng.choice(leaves)] = 1.0
    return rewards


def path_of(view) -> str:
    return view.observation.split("=", 1)[1]


def exact_evaluator(env: TreeEnv) -> FunctionEvaluator:
    """The best leaf reward below the node, read from the observation only."""
    return FunctionEvaluator(lambda v: env.best_below(path_of(v)), name="exact")


def ordered_proposer(env: TreeEnv) -> FunctionProposer:
    """The actions in fixed order (a..c): a deterministic policy that enumerates children."""
    return FunctionProposer(lambda v: list(v.available_actions or ()), name="ordered")
