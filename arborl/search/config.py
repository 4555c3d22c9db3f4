"""`SearchConfig`: the `search` section of the train config (used by `rollout.mode=tree`).

Its own section, not fields of `RolloutConfig`, so that `arborl.rollout` knows nothing of
search: the rollout section says *whether* episodes are trees (`rollout.mode`), this one
says *how* the trees are grown. Names are checked against the search registries at
start-up (before any env is built); the registries hold `"module:attr"` strings, so the
check imports no search code.

    arborl train rollout.mode=tree search.algo=mcts search.budget=24
"""

from __future__ import annotations

from dataclasses import dataclass, field

TRAINING_EVALUATORS = ("heuristic", "rollout", "none")
"""Evaluators a training tree may use (`judge` and `rm:` need a second model)."""


@dataclass
class SearchConfig:
    """How each task's search tree is grown when `rollout.mode=tree`."""

    algo: str = field(default="tot-bfs", metadata={"registry": "arborl.search.registry:ALGORITHMS"})
    """Search id (tot-bfs, tot-dfs, dfsdt, mcts, got, best-of-n, ...; `arborl search --help`
    lists them)."""
    budget: int = 32
    """Env steps (nodes) per tree (`Budget.max_nodes`)."""
    params: dict = field(default_factory=dict)
    """The search's parameters, e.g. {breadth: 2, beam: 2} for tot-bfs."""
    evaluator: str = "heuristic"
    """Node scores guiding the search: heuristic (the env's; none when it has no built-in
    heuristic), rollout (a policy playout), none (each node's return so far)."""
    tree_adv: str = "mc_sibling"
    """Per-node advantage written as each row's reward: mc_value (V(n) - V(parent)),
    sibling, mc_sibling, treerl (see `arborl.search.export`)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, prefix: str = "search") -> None:
        """Raise `ValueError` naming the field, the value and what is allowed."""
        from arborl.search.export import ADV_MODES
        from arborl.search.registry import ALGORITHMS

        if not isinstance(self.budget, int) or isinstance(self.budget, bool) or self.budget < 1:
            raise ValueError(f"{prefix}.budget={self.budget!r} must be an int >= 1")
        if not isinstance(self.params, dict):
            raise ValueError(f"{prefix}.params={self.params!r} must be a mapping of parameters")
        for name, value, known in (
            ("algo", self.algo, ALGORITHMS.names()),
            ("tree_adv", self.tree_adv, list(ADV_MODES)),
            ("evaluator", self.evaluator, list(TRAINING_EVALUATORS)),
        ):
            if value not in known:
                raise ValueError(f"{prefix}.{name}={value!r} is not one of {known}")
