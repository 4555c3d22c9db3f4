"""`DaggerPolicy`: a scoring student whose every state a teacher labels, and whose action
is replaced by the teacher's with probability β (DAgger's mixing coefficient).

Each turn the student (`ScoringPolicy`, `agent.action_mode=score`) chooses as it always
does; the teacher (`labels(episodes, envs, actions)`, one batched call for the states it
has not seen: `arborl.train.teacher.TeacherLabels`) gives a distribution over the same
candidates, recorded on the turn's `ScoredChoice.teacher_p` (the batch column
`teacher_p`). Then, per episode-turn, a uniform drawn from `seed` decides who acts: below
β, an action sampled from the teacher's distribution is executed instead, and the row
records it with the student's own log-probability of it (`old_logp`), flagged
`teacher_acted`. β=1 executes only the teacher's actions (the states are the teacher's,
as in offline demos), β=0 only the student's (pure on-policy labels).

A row the teacher acted on is off-policy for a policy-gradient loss; DAgger's usual
schedule takes β to 0 before RL's weight matters.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from arborl.agent.parsing import action_response
from arborl.rollout.episode import EpisodeState
from arborl.rollout.policies import Decision


class DaggerPolicy:
    """A student policy, labelled by a teacher and mixed with it (module docstring)."""

    def __init__(self, student, labels: Callable, beta: float, seed: int | None) -> None:
        """student: a `ScoringPolicy`; labels: `fn(episodes, envs, actions) -> [K probs]`;
        beta: the probability the teacher's action is executed; seed: the draws' seed."""
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta={beta!r} must be in [0, 1] (teacher.beta, teacher.beta_end)")
        self.student, self.labels, self.beta = student, labels, beta
        self.rng = random.Random(seed)
        self.name = student.name
        self.num_decisions = 0
        self.num_teacher_actions = 0

    def begin_rollout(self, episodes: Sequence[EpisodeState]) -> None:
        self.student.begin_rollout(episodes)

    def act(self, episodes: Sequence[EpisodeState], envs: Sequence[Any]) -> list[Decision]:
        decisions = self.student.act(episodes, envs)
        live = [k for k, d in enumerate(decisions) if d.choice is not None]
        if not live:
            return decisions
        probs = self.labels(
            [episodes[k] for k in live],
            [envs[k] for k in live],
            [decisions[k].choice.actions for k in live],
        )
        for k, p in zip(live, probs):
            d = decisions[k]
            self.num_decisions += 1
            # one draw decides who acts, a second picks the teacher's action (always both,
            # so β changes which states follow, never the stream's alignment)
            teacher_acts, u = self.rng.random() < self.beta, self.rng.random()
            if teacher_acts:
                self.num_teacher_actions += 1
                decisions[k] = self._teacher_decision(d, p, _sample(p, u))
            else:
                decisions[k] = replace(d, choice=replace(d.choice, teacher_p=list(p)))
        return decisions

    def _teacher_decision(self, d: Decision, p: list[float], j: int) -> Decision:
        """The student's decision with the teacher's choice `j` executed instead."""
        c = d.choice
        (x,) = self.student.scored_states([(tuple(d.prompt_ids), tuple(c.actions))])  # cached
        agent_cfg = self.student.agent_cfg
        return replace(
            d,
            action=c.actions[j],
            response_text=action_response(c.actions[j], agent_cfg),
            response_ids=list(x.token_ids[j]),
            logprobs=list(x.token_logp[j]),
            choice=replace(
                c, chosen=j, logp=x.choice_logp[j], teacher_p=list(p), teacher_acted=True
            ),
        )


def _sample(p: Sequence[float], u: float) -> int:
    """Inverse-CDF draw from `p` with the uniform `u` (the last index if rounding runs out)."""
    acc = 0.0
    for j, w in enumerate(p):
        acc += w
        if u < acc:
            return j
    return max(j for j, w in enumerate(p) if w > 0)
