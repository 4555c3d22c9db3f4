"""Per-episode records the rollout loop fills in, and their conversion to `Trajectory`.

An `EpisodeState` is everything one episode accumulated: the turns (prompt ids, generated
ids and logprobs, parsed action, env feedback), its limits and flags, and, for the
`episode` view, the growing token sequence with a per-token generated/turn record. The
Batch builders and the `Trajectory` writer both read from it, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from arborl.data.codec import encode_json_value
from arborl.data.trajectory import Step, Trajectory

TRUNCATION_REASONS = ("", "max_turns", "episode_tokens", "prompt_tokens", "env_error")
"""Why an episode was cut: not cut, turn limit (ours or the env's), generated-token budget
spent, a growing (`episode`-view) context longer than `max_prompt_tokens`, or a failed call
to an out-of-process env (`info["env_error"]`)."""


@dataclass
class ScoredChoice:
    """`agent.action_mode=score`: the candidates one turn chose among, enough to recompute
    its categorical in the update (`arborl.models.candidates`)."""

    actions: list[str]
    """The env's available actions, in its order (duplicates dropped)."""
    token_ids: list[list[int]]
    """Each candidate's response tokens (its rendered text and the end-of-turn token)."""
    norms: list[float]
    """Each candidate's score divisor under `agent.score_norm` (1, #tokens or #words)."""
    chosen: int
    """Index of the sampled candidate."""
    logp: float
    """Log-probability of the chosen candidate under the categorical, at the rollout
    temperature (the `old_logp` of its training row)."""
    teacher_p: list[float] | None = None
    """A teacher's probabilities over `actions` (learning from a teacher,
    `arborl.train.distill`); None when no teacher labelled this state."""
    teacher_acted: bool = False
    """The teacher's action was executed here instead of the student's (DAgger's mix)."""


@dataclass
class TurnRecord:
    """One turn of one episode."""

    observation: str
    """The observation the action was taken in."""
    action: str
    """The parsed action sent to the env."""
    response_text: str
    """The response as decoded (without the end-of-turn token)."""
    format_ok: bool
    """The response followed the agent's action format."""
    anchor: Any
    """Hashable env state the action was taken in (`info['anchor']` before the step)."""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    """The episode was cut on this turn (any reason in `TRUNCATION_REASONS`)."""
    info: dict[str, Any] = field(default_factory=dict)
    """The env's info after the step."""
    potential: float | None = None
    """`info['potential']` before the step (the env's shaping potential), if it gives one."""
    prompt_ids: list[int] | None = None
    """Tokens the model saw (after any left-truncation); None for non-LM policies."""
    response_ids: list[int] | None = None
    """Generated tokens, exactly as sampled (incl. the end token when emitted)."""
    logprobs: list[float] | None = None
    """Sampling logprob of each generated token."""
    finish_reason: str = "stop"
    """'stop' (end token or stop string) or 'length' (turn or episode budget reached)."""
    prompt_truncated: bool = False
    """The prompt was left-truncated to `max_prompt_tokens`."""
    choice: ScoredChoice | None = None
    """Score mode: the candidates and the choice (None for generated turns)."""

    @property
    def valid_action(self) -> bool:
        return bool(self.info.get("valid_action", True))

    @property
    def won(self) -> bool:
        return bool(self.info.get("won", False))


@dataclass
class EpisodeState:
    """One episode while it runs and after it ends."""

    index: int
    """Row in the env pool."""
    group_id: int
    """Task index within the call; episodes of one group share the seed (and the task)."""
    traj_id: str
    """Unique id of the episode."""
    seed: int
    task_id: str
    instruction: str
    observation: str
    """The current observation (the next action is taken in it)."""
    info: dict[str, Any]
    """The current info (after reset, then after each step)."""
    max_turns: int
    turns: list[TurnRecord] = field(default_factory=list)
    done: bool = False
    truncated: bool = False
    truncation_reason: str = ""
    generated_tokens: int = 0
    sample_seed: int | None = None
    """The episode's sampling stream (set by `LMPolicy.begin_rollout`); turn t samples with
    seed `row_seed(sample_seed, t)`, whichever episodes share its generate call."""
    # Agent-side state, owned by the LM policy.
    memory: Any = None
    """The episode's `arborl.agent.Memory` (step view)."""
    num_synced: int = 0
    """Turns already added to `memory` / `seq_ids`."""
    seq_ids: list[int] = field(default_factory=list)
    """Episode view: the growing token sequence (prompts, generations, observations)."""
    seq_generated: list[bool] = field(default_factory=list)
    """Episode view: per token, whether the policy generated it."""
    seq_logp: list[float] = field(default_factory=list)
    """Episode view: per token, its sampling logprob (0.0 where not generated)."""
    seq_turn: list[int] = field(default_factory=list)
    """Episode view: per token, the turn it belongs to."""

    @property
    def won(self) -> bool:
        return bool(self.turns[-1].won) if self.turns else bool(self.info.get("won", False))

    @property
    def total_return(self) -> float:
        return float(sum(t.reward for t in self.turns))

    def end(self, reason: str) -> None:
        """Mark the episode cut for `reason` (see `TRUNCATION_REASONS`)."""
        self.done, self.truncated, self.truncation_reason = True, True, reason
        if self.turns:
            self.turns[-1].truncated = True


def json_safe_info(info: dict[str, Any]) -> dict[str, Any]:
    """The info values a Trajectory can store (tuples become lists; others are dropped)."""
    out = {}
    for k, v in info.items():
        try:
            encode_json_value(v)
        except TypeError:
            continue
        out[k] = _plain(v)
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, tuple | list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if hasattr(v, "item") and not isinstance(v, str | bytes):
        return v.item()
    return v


def to_trajectory(ep: EpisodeState, env_id: str, meta: dict[str, Any]) -> Trajectory:
    """The episode as a `Trajectory` record (JSON-safe info, `response` where it differs)."""
    steps = [
        Step(
            observation=t.observation,
            action=t.action,
            reward=float(t.reward),
            terminated=bool(t.terminated),
            truncated=bool(t.truncated),
            info=json_safe_info(t.info),
            response=t.response_text if t.response_text != t.action else None,
        )
        for t in ep.turns
    ]
    return Trajectory(
        task_id=ep.task_id,
        env_id=env_id,
        seed=int(ep.seed),
        instruction=ep.instruction,
        steps=steps,
        won=ep.won,
        meta={
            **meta,
            "group_id": ep.group_id,
            "traj_id": ep.traj_id,
            "truncation_reason": ep.truncation_reason,
            "generated_tokens": ep.generated_tokens,
        },
    )
