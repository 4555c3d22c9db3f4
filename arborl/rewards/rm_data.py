"""Reward-model training data from the agent's own trajectories.

Two kinds of records, both JSONL of plain dicts so they can be inspected and curated:

* Preference pairs (outcome RM): trajectories of the same task, the one with the higher
  return preferred. Ties carry no preference and are dropped; so are near-duplicates (two
  episodes whose action sequences are almost the same teach the model about noise, and
  repeated copies of one episode would weigh it many times), first by collapsing exact
  repeats within a task, then by dropping pairs whose action sequences are too similar.
* Step labels (process RM): Math-Shepherd-style Monte-Carlo estimates. The env is replayed
  to the state after each step (checked against the recorded observations), `snapshot()`
  taken, and `num_rollouts` continuations of the policy run from `restore()`d copies; the
  step's label is the fraction of continuations that won. All continuations of a chunk of
  states run as one batch, so an LM policy makes one generate call per turn.
"""

from __future__ import annotations

import difflib
import json
import math
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from arborl.data.trajectory import Step, Trajectory
from arborl.envs import make
from arborl.rewards.reward_model import FINAL_OBSERVATION
from arborl.rollout.episode import EpisodeState, TurnRecord
from arborl.rollout.policies import Decision, OraclePolicy, Policy, RandomPolicy


@dataclass
class PreferencePair:
    """Two trajectories of one task; `chosen` had the higher return."""

    task_id: str
    """The task both episodes solved (or tried to)."""
    chosen: Trajectory
    """The preferred trajectory (higher return)."""
    rejected: Trajectory
    """The other trajectory."""
    margin: float
    """Return of `chosen` minus return of `rejected` (> 0)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "margin": self.margin,
            "chosen": self.chosen.to_dict(),
            "rejected": self.rejected.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PreferencePair:
        return cls(
            d["task_id"],
            Trajectory.from_dict(d["chosen"]),
            Trajectory.from_dict(d["rejected"]),
            float(d["margin"]),
        )


@dataclass
class StepLabels:
    """A trajectory with one Monte-Carlo label per step."""

    trajectory: Trajectory
    """The labelled trajectory."""
    labels: list[float]
    """Per step: success rate of the policy's continuations from the state after it; NaN
    (`null` in the file) for a step that is context only (`monte_carlo_sibling_labels`
    labels just the last step of its records)."""
    num_rollouts: list[int] = field(default_factory=list)
    """Per step: continuations run (0 where the step ended the episode: label is exact)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.trajectory.task_id,
            "labels": [None if math.isnan(x) else x for x in self.labels],
            "num_rollouts": self.num_rollouts,
            "trajectory": self.trajectory.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepLabels:
        traj = Trajectory.from_dict(d["trajectory"])
        labels = [math.nan if x is None else float(x) for x in d["labels"]]
        if len(labels) != traj.num_steps:
            raise ValueError(
                f"step-label record of task {traj.task_id!r} has {len(labels)} labels for "
                f"{traj.num_steps} steps; regenerate it with `arborl rm data`"
            )
        return cls(traj, labels, [int(x) for x in d.get("num_rollouts", [])])


# --- preference pairs -------------------------------------------------------------------------
def action_key(traj: Trajectory) -> tuple[str, ...]:
    """The episode's actions, normalised (case, surrounding space), as a hashable key."""
    return tuple(s.action.strip().lower() for s in traj.steps)


def similarity(a: Trajectory, b: Trajectory) -> float:
    """Similarity in [0, 1] of two episodes' action sequences (difflib ratio over actions)."""
    return difflib.SequenceMatcher(None, action_key(a), action_key(b), autojunk=False).ratio()


def build_preference_pairs(
    trajectories: Iterable[Trajectory],
    min_margin: float = 1e-6,
    max_similarity: float = 0.95,
    max_pairs_per_task: int | None = None,
    seed: int = 0,
) -> list[PreferencePair]:
    """All (higher-return, lower-return) pairs within each (env, task) group.

    Exact repeats of an action sequence within a task are collapsed to the first one;
    pairs whose returns differ by at most `min_margin` (ties) or whose action sequences
    have `similarity` above `max_similarity` are dropped. With `max_pairs_per_task`, a
    seeded random subset of each task's pairs is kept.
    """
    if min_margin < 0 or not 0.0 <= max_similarity <= 1.0:
        raise ValueError(
            f"need min_margin >= 0 and 0 <= max_similarity <= 1, got {min_margin}, {max_similarity}"
        )
    groups: dict[tuple[str, str], dict[tuple, Trajectory]] = defaultdict(dict)
    for t in trajectories:
        groups[(t.env_id, t.task_id)].setdefault(action_key(t), t)
    rng = random.Random(seed)
    pairs: list[PreferencePair] = []
    for (_, task_id), unique in sorted(groups.items()):
        trajs = list(unique.values())
        found = []
        for i in range(len(trajs)):
            for j in range(i + 1, len(trajs)):
                a, b = trajs[i], trajs[j]
                diff = a.total_return - b.total_return
                if abs(diff) <= min_margin or similarity(a, b) > max_similarity:
                    continue
                hi, lo = (a, b) if diff > 0 else (b, a)
                found.append(PreferencePair(task_id, hi, lo, abs(diff)))
        if max_pairs_per_task is not None and len(found) > max_pairs_per_task:
            found = rng.sample(found, max_pairs_per_task)
        pairs.extend(found)
    return pairs


# --- Monte-Carlo step labels ------------------------------------------------------------------
class MixedPolicy:
    """The env's oracle with probability `p_oracle` per step, else a uniform random action:
    a cheap policy of tunable skill for data generation and benches."""

    def __init__(self, p_oracle: float, seed: int = 0) -> None:
        if not 0.0 <= p_oracle <= 1.0:
            raise ValueError(f"p_oracle={p_oracle!r} must be in [0, 1]")
        self.name = f"mixed:{p_oracle:g}"
        self.p_oracle = p_oracle
        self.rng = random.Random(seed)
        self.oracle, self.random = OraclePolicy(), RandomPolicy(seed + 1)

    def act(self, episodes: Sequence[EpisodeState], envs: Sequence[Any]) -> list[Decision]:
        out = []
        for ep, env in zip(episodes, envs):
            pick = self.oracle if self.rng.random() < self.p_oracle else self.random
            out.extend(pick.act([ep], [env]))
        return out


def make_data_policy(spec: str, seed: int = 0, rollout_cfg=None, agent_cfg=None) -> Policy:
    """`mixed:P` (oracle with probability P, else random) or any `make_policy` spec."""
    if spec.startswith("mixed:"):
        try:
            p = float(spec.split(":", 1)[1])
        except ValueError as e:
            raise ValueError(
                f"policy {spec!r}: write mixed:P with P in [0, 1], e.g. mixed:0.5"
            ) from e
        return MixedPolicy(p, seed)
    from arborl.rollout import RolloutConfig, make_policy

    return make_policy(spec, rollout_cfg or RolloutConfig(seed=seed), agent_cfg, seed=seed)


State = tuple[Any, str, dict]
"""(env snapshot, observation, info) at one point of an episode."""


def _walk(env: Any, traj: Trajectory, split: str | None) -> list[tuple[State, State]]:
    """Reset `env` to `traj`'s task and step its actions; per step, the state before it
    and the state after it. Raises when the env does not reproduce the recorded task or
    observations (wrong env kwargs or split)."""
    split = split or traj.meta.get("split", "train")
    obs, info = env.reset(seed=traj.seed, options={"split": split})
    if info.get("task_id", traj.task_id) != traj.task_id:
        raise ValueError(
            f"env reset with seed {traj.seed} (split {split!r}) gives task "
            f"{info.get('task_id')!r}, but the trajectory is of task {traj.task_id!r}; pass the "
            "env kwargs and split the trajectories were recorded with"
        )
    out = []
    for t, step in enumerate(traj.steps):
        if obs != step.observation:
            raise ValueError(
                f"trajectory of task {traj.task_id!r} does not replay: the observation before "
                f"step {t} differs from the recorded one; pass the env kwargs it was recorded with"
            )
        before = (env.snapshot(), obs, info)
        obs, _, _, _, info = env.step(step.action)
        out.append((before, (env.snapshot(), obs, info)))
    return out


def replay(env: Any, traj: Trajectory, split: str | None = None) -> list[State]:
    """Reset `env` to `traj`'s task and step its actions; after each step return
    (snapshot, observation, info). Raises when the env does not reproduce the recorded
    task or observations (wrong env kwargs or split)."""
    return [after for _, after in _walk(env, traj, split)]


@dataclass
class _Branch:
    record: int
    step: int
    episode: EpisodeState


def _branch_episode(traj: Trajectory, t: int, env: Any, obs: str, info: dict) -> EpisodeState:
    """An episode state standing after step `t` of `traj`, with the earlier turns as
    history (so a policy with memory sees the same context it would have seen)."""
    turns = [
        TurnRecord(
            observation=s.observation,
            action=s.action,
            response_text=s.response if s.response is not None else s.action,
            format_ok=True,
            anchor=None,
        )
        for s in traj.steps[: t + 1]
    ]
    limit = int(getattr(env, "max_turns", 0) or 10**9)
    return EpisodeState(
        index=0, group_id=0, traj_id="", seed=int(traj.seed or 0), task_id=traj.task_id,
        instruction=traj.instruction, observation=obs, info=info, max_turns=limit, turns=turns,
    )  # fmt: skip


def _run_branches(policy: Policy, branches: list[_Branch], envs: list[Any]) -> list[bool]:
    """Roll every branch to its end; whether each one won."""
    while live := [k for k, b in enumerate(branches) if not b.episode.done]:
        decisions = policy.act([branches[k].episode for k in live], [envs[k] for k in live])
        for k, d in zip(live, decisions):
            ep = branches[k].episode
            if d.action is None:
                ep.done = True
                continue
            obs, reward, term, trunc, info = envs[k].step(d.action)
            ep.turns.append(
                TurnRecord(ep.observation, d.action, d.response_text, d.format_ok, None,
                           reward=reward, terminated=term, truncated=trunc, info=info,
                           prompt_ids=d.prompt_ids, response_ids=d.response_ids,
                           logprobs=d.logprobs)
            )  # fmt: skip
            ep.observation, ep.info = obs, info
            ep.done = term or trunc or len(ep.turns) >= ep.max_turns
    return [b.episode.won for b in branches]


def _label_by_continuations(
    records: list[StepLabels],
    jobs: list[tuple[int, int, State]],
    policy: Policy,
    env_kwargs: dict[str, Any],
    num_rollouts: int,
    max_envs: int,
) -> None:
    """Set `records[r].labels[t]` to the success rate of `num_rollouts` continuations of
    `policy` from the state of each job (r, t, state after step t); states run in chunks
    of about `max_envs` continuations, each chunk one batched rollout."""
    per_chunk = max(1, max_envs // num_rollouts)
    for c in range(0, len(jobs), per_chunk):
        branches, envs = [], []
        for r, t, (snap, obs, info) in jobs[c : c + per_chunk]:
            traj = records[r].trajectory
            records[r].labels[t] = 0.0
            for _ in range(num_rollouts):
                env = make(traj.env_id, **env_kwargs)
                env.restore(snap)
                branches.append(_Branch(r, t, _branch_episode(traj, t, env, obs, dict(info))))
                envs.append(env)
        won = _run_branches(policy, branches, envs)
        for b, w in zip(branches, won):
            records[b.record].labels[b.step] += float(w) / num_rollouts
            records[b.record].num_rollouts[b.step] += 1
        for env in envs:
            env.close()


def _ended(step_result: tuple, t: int, env: Any) -> bool:
    """Whether step `t` (0-based) with `env.step`'s (obs, reward, term, trunc, info) ended
    the episode, by the env's flags or its turn limit."""
    _, _, term, trunc, _ = step_result
    limit = int(getattr(env, "max_turns", 0) or 10**9)
    return bool(term or trunc or t + 1 >= limit)


def monte_carlo_step_labels(
    trajectories: Sequence[Trajectory],
    policy: Policy,
    env_kwargs: dict[str, Any] | None = None,
    num_rollouts: int = 8,
    max_envs: int = 256,
    split: str | None = None,
) -> list[StepLabels]:
    """Label every step of every trajectory by its continuations' success rate.

    A step that ended the episode is labelled exactly (1 if won, else 0) without
    rollouts. Other steps get `num_rollouts` continuations of `policy` from the env state
    after the step; states are processed in chunks of about `max_envs` continuations.
    """
    if num_rollouts < 1:
        raise ValueError(f"num_rollouts={num_rollouts} must be >= 1")
    env_kwargs = env_kwargs or {}
    records = [StepLabels(t, [0.0] * t.num_steps, [0] * t.num_steps) for t in trajectories]
    jobs: list[tuple[int, int, State]] = []  # (record, step, state after the step)
    probe_envs: dict[str, Any] = {}
    for r, traj in enumerate(trajectories):
        env = probe_envs.setdefault(traj.env_id, make(traj.env_id, **env_kwargs))
        for t, (_, after) in enumerate(_walk(env, traj, split)):
            step = traj.steps[t]
            if step.terminated or step.truncated or t == traj.num_steps - 1:
                records[r].labels[t] = float(bool(after[2].get("won", False)))
            else:
                jobs.append((r, t, after))
    _label_by_continuations(records, jobs, policy, env_kwargs, num_rollouts, max_envs)
    for env in probe_envs.values():
        env.close()
    return records


def monte_carlo_sibling_labels(
    trajectories: Sequence[Trajectory],
    policy: Policy,
    env_kwargs: dict[str, Any] | None = None,
    num_rollouts: int = 4,
    max_envs: int = 256,
    split: str | None = None,
    dedupe_states: bool = True,
) -> list[StepLabels]:
    """Monte-Carlo labels for the actions the trajectories did *not* take.

    At each state of each trajectory, every other action of `info['available_actions']`
    is stepped from a `restore()`d snapshot and labelled as `monte_carlo_step_labels`
    labels a taken step (exactly if it ended the episode, else by `num_rollouts`
    continuations of `policy`). Each record is the trajectory's prefix up to that state
    plus the alternative step, and only that last step is labelled (the earlier labels
    are NaN: context). With `dedupe_states`, a state whose observation already came up
    earlier in the same trajectory is not branched again (a policy stuck in a loop would
    otherwise label the same siblings many times).

    Why: the taken steps of one task share its maze, its numbers, its page, so a small
    PRM can fit their labels by recognising which tasks are hard. Siblings share all of
    that and differ only in the action, which is exactly what PRM-guided search ranks.
    """
    if num_rollouts < 1:
        raise ValueError(f"num_rollouts={num_rollouts} must be >= 1")
    env_kwargs = env_kwargs or {}
    records: list[StepLabels] = []
    jobs: list[tuple[int, int, State]] = []
    probe_envs: dict[str, Any] = {}
    for traj in trajectories:
        probe = probe_envs.setdefault(traj.env_id, make(traj.env_id, **env_kwargs))
        seen: set[str] = set()
        for t, ((snap, obs, info), _) in enumerate(_walk(probe, traj, split)):
            if dedupe_states and obs in seen:
                continue
            seen.add(obs)
            actions = info.get("available_actions")
            if actions is None:
                raise ValueError(
                    f"sibling labels need info['available_actions'], but {traj.env_id} gives "
                    "none; label only the taken steps (monte_carlo_step_labels)"
                )
            for action in dict.fromkeys(actions):
                if action == traj.steps[t].action:
                    continue
                env = make(traj.env_id, **env_kwargs)
                env.restore(snap)
                result = env.step(action)
                next_obs, reward, term, trunc, next_info = result
                step = Step(observation=obs, action=action, reward=float(reward),
                            terminated=bool(term), truncated=bool(trunc))  # fmt: skip
                branch = replace(traj, steps=[*traj.steps[:t], step],
                                 meta={**traj.meta, FINAL_OBSERVATION: next_obs})  # fmt: skip
                records.append(StepLabels(branch, [math.nan] * t + [0.0], [0] * (t + 1)))
                if _ended(result, t, env):
                    records[-1].labels[t] = float(bool(next_info.get("won", False)))
                else:
                    jobs.append((len(records) - 1, t, (env.snapshot(), next_obs, next_info)))
                env.close()
    _label_by_continuations(records, jobs, policy, env_kwargs, num_rollouts, max_envs)
    for env in probe_envs.values():
        env.close()
    return records


# --- files ------------------------------------------------------------------------------------
def write_jsonl(path: str | Path, records: Iterable[Any]) -> Path:
    """Write records (anything with `to_dict`) as JSON lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r.to_dict()) + "\n")
    return path


def _read(path: str | Path, cls, what: str) -> list:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{what} file {str(path)!r} does not exist; make it with `arborl rm data`"
        )
    out = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(cls.from_dict(json.loads(line)))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                    raise ValueError(f"{path}:{lineno}: not a {what} record: {e}") from e
    return out


def read_pairs(path: str | Path) -> list[PreferencePair]:
    return _read(path, PreferencePair, "preference-pair")


def read_step_labels(path: str | Path) -> list[StepLabels]:
    return _read(path, StepLabels, "step-label")
