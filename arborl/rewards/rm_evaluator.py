"""A reward model as a search evaluator (best-of-N, PRM beam search, MCTS value).

`RewardModelEvaluator` follows `arborl.search.base.Evaluator`: it turns each `NodeView`
(the observations, responses and actions on the way to a node: nothing the env hid) into
a partial `Trajectory`, scores the whole batch in one reward-model call and maps the raw
score through a sigmoid into [0, 1], the search package's "probability of success" scale.
A PRM's score of a prefix estimates exactly that; an ORM's is monotone in it.

It accepts any scorer with `score_steps(trajectories) -> list[list[float]]`: a local
`RewardModel` or an `RMClient` talking to `arborl rm serve`. The search package is not
imported (rewards and search sit side by side), only its duck-typed protocol followed.

    evaluator = load_rm_evaluator("runs/prm")            # or "http://127.0.0.1:8600"
    problem = Problem(env, proposer, evaluator)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from arborl.data.trajectory import Step, Trajectory
from arborl.rewards.reward_model import FINAL_OBSERVATION


def view_to_trajectory(view: Any) -> Trajectory:
    """A search `NodeView` as a partial trajectory (one step per action on its path)."""
    steps = []
    for (obs, response), action, reward in zip(view.history, view.actions, view.rewards):
        steps.append(
            Step(
                observation=obs,
                action=action,
                reward=float(reward),
                response=response if response != action else None,
            )
        )
    # The node's own observation (the state its last action led to) is shown last.
    meta = {FINAL_OBSERVATION: view.observation}
    return Trajectory("search", "", instruction=view.instruction, steps=steps, meta=meta)


def sigmoid(x: float) -> float:
    if math.isnan(x):
        return 0.5
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class RewardModelEvaluator:
    """Scores search nodes with a reward model; see the module docstring."""

    uses_model = True

    def __init__(
        self,
        scorer: Any,
        name: str = "rm",
        use_env_outcome: bool = True,
        root_value: float = 0.5,
        batch_size: int = 64,
    ) -> None:
        """`use_env_outcome`: a node the env already ended scores 1.0 if won, else 0.0
        (the env's own output, not a hidden answer). `root_value`: the score of a node
        with no steps yet (the model has nothing to judge)."""
        if not hasattr(scorer, "score_steps"):
            raise TypeError(
                f"scorer {type(scorer).__name__} has no score_steps(trajectories); pass a "
                "RewardModel or an RMClient"
            )
        self.scorer, self.name = scorer, name
        self.use_env_outcome, self.root_value = use_env_outcome, float(root_value)
        self.batch_size = batch_size
        self.num_scored = 0

    def score(self, views: Sequence[Any], *, seed: int = 0) -> list[float]:
        """One float in [0, 1] per view, in order; one scorer call for the whole batch."""
        out: list[float | None] = [None] * len(views)
        todo = []
        for i, v in enumerate(views):
            if self.use_env_outcome and v.done:
                out[i] = 1.0 if v.won else 0.0
            elif not v.actions:
                out[i] = self.root_value
            else:
                todo.append(i)
        if todo:
            trajs = [view_to_trajectory(views[i]) for i in todo]
            for i, s in zip(todo, self._score_last(trajs)):
                out[i] = sigmoid(s)
            self.num_scored += len(todo)
        return [float(x) for x in out]  # type: ignore[arg-type]

    def _score_last(self, trajs: list[Trajectory]) -> list[float]:
        """Each path's last-step score. A scorer's `score` reads only that step (one short
        sequence per node, not one per step on its path); else `score_steps(...)[-1]`."""
        fn = getattr(self.scorer, "score", None)
        if fn is None:
            return [s[-1] for s in self._call(self.scorer.score_steps, trajs)]
        return list(self._call(fn, trajs))

    def _call(self, fn: Any, trajs: list[Trajectory]) -> Any:
        try:
            return fn(trajs, batch_size=self.batch_size)
        except TypeError:  # a scorer without a batch_size argument (e.g. a user function)
            return fn(trajs)


def load_scorer(spec: str, token: str | None = None, timeout_s: float = 60.0) -> Any:
    """A local reward model directory, or an `http(s)://` URL of `arborl rm serve`."""
    if spec.startswith(("http://", "https://")):
        from arborl.rewards.rm_client import RMClient

        return RMClient(spec, token=token, timeout_s=timeout_s)
    from arborl.rewards.reward_model import RewardModel

    return RewardModel.from_pretrained(spec)


def load_rm_evaluator(spec: str, token: str | None = None, **kwargs: Any) -> RewardModelEvaluator:
    """`RewardModelEvaluator` over `load_scorer(spec, token)`."""
    return RewardModelEvaluator(load_scorer(spec, token), name=f"rm:{spec}", **kwargs)
