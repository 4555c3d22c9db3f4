"""Teachers: who labels the states a student visits (`teacher.kind`), and the cache that
makes each distinct state cost one teacher call.

A teacher answers, for a batch of live states, a probability distribution over each
state's candidate actions (`info["available_actions"]`, as `agent.action_mode=score`
lists them). Three kinds are registered in `TEACHERS`, each a `TeacherKind` record that
says what `teacher.source` must name and how the teacher is built:

  oracle    the env's own expert, `env.oracle_action()` (one-hot). It reads the env's
            hidden state, so its labels are never cached.
  callable  `teacher.source=pkg.module:fn`, `fn(observation, actions, info)` returning an
            action (str), a {action: weight} dict or a list of K weights (normalised
            here). Cached by (instruction, observation, actions): it sees nothing else.
  model     `teacher.source=` a preset name, an arborl checkpoint's policy dir or an HF
            model dir, scoring the candidates with its own tokenizer
            (`ScoringPolicy.scored_states`) on the prompt the student's agent settings
            build. Cached by (its prompt ids, actions).

A new kind is one `TEACHERS.register(TeacherKind(...))`; `teacher.kind=pkg.module:RECORD`
names one outside arborl.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from arborl.config import ConfigError
from arborl.registry import Registry, load_entry_point


@dataclass
class TeacherConfig:
    """Learn from a teacher on the student's own states (DAgger / on-policy distillation;
    docs/training.md, "Learn from a teacher"). Off while `kind` is empty."""

    kind: str = ""
    """Who labels the states (`TEACHERS`): oracle, callable or model; "" turns it off."""
    source: str = ""
    """What the teacher is: `pkg.module:fn` for kind=callable; a preset name, checkpoint
    policy dir or HF model dir for kind=model; unused for kind=oracle."""
    label: Literal["distribution", "action"] = "distribution"
    """"distribution": KL to the teacher's distribution over the candidates; "action":
    cross-entropy to its most likely action (the same for an oracle)."""
    temperature: float = field(default=1.0, metadata={"min": 0.0})
    """The model teacher's categorical temperature (0: its argmax, one-hot)."""
    coef: float = field(default=1.0, metadata={"min": 0.0})
    """Weight of the distillation term beside the policy-gradient loss at step 0."""
    coef_end: float = field(default=1.0, metadata={"min": 0.0})
    """Its weight after `coef_steps` RL steps (linear in between)."""
    coef_steps: int = field(default=0, metadata={"min": 0})
    """Steps over which the weight moves from `coef` to `coef_end` (0: constant `coef`)."""
    beta: float = field(default=0.0, metadata={"min": 0.0, "max": 1.0})
    """DAgger's mixing coefficient at step 0: the probability that the teacher's action is
    executed instead of the student's at each turn (1: teacher only, 0: student only)."""
    beta_end: float = field(default=0.0, metadata={"min": 0.0, "max": 1.0})
    """Its value after `beta_steps` RL steps (linear in between)."""
    beta_steps: int = field(default=0, metadata={"min": 0})
    """Steps over which β moves from `beta` to `beta_end` (0: constant `beta`)."""
    buffer_size: int = field(default=0, metadata={"min": 0})
    """Labelled states of earlier steps kept and trained on again each step (classic
    DAgger's aggregated data set), oldest dropped first; 0: this step's states only."""
    cache_size: int = field(default=100_000, metadata={"min": 0})
    """Teacher labels kept by state (cleared when full); 0 turns the cache off."""

    @property
    def enabled(self) -> bool:
        return bool(self.kind)

    def validate(self, prefix: str = "teacher") -> None:
        if not self.kind:
            return
        record = get_teacher_kind(self.kind, prefix)
        if record.source and not self.source:
            raise ConfigError(
                f"{prefix}.kind={self.kind} needs {prefix}.source: {record.source} "
                f"(e.g. {prefix}.source={record.example})"
            )


def check_teacher(cfg) -> None:
    """The `teacher` section's rules against the rest of the train config."""
    t = cfg.teacher
    t.validate("teacher")
    if cfg.algo.name == "distill" and not t.enabled:
        raise ConfigError(
            "algo=distill trains the teacher's term alone, but no teacher is set: give "
            "teacher.kind=oracle (or callable with teacher.source=pkg.module:fn, or model "
            "with teacher.source=<preset or dir>)"
        )
    if not t.enabled:
        return
    from arborl.agent.config import ACTION_MODES
    from arborl.train.rollout_modes import ROLLOUT_MODES, get_rollout_mode

    if not ACTION_MODES.get(cfg.agent.action_mode).needs_available_actions:
        able = [n for n in ACTION_MODES if ACTION_MODES[n].needs_available_actions]
        raise ConfigError(
            f"teacher.kind={t.kind} labels a distribution over the env's available actions, "
            f"and agent.action_mode={cfg.agent.action_mode} does not choose among them: set "
            f"agent.action_mode to one of {able}"
        )
    # The teacher's rollout is its own independent episodes (`TeacherRollout`), the
    # capability a rollout mode declares as `async_envs`.
    if not get_rollout_mode(cfg.rollout.mode).async_envs:
        able = [n for n in ROLLOUT_MODES if get_rollout_mode(n).async_envs]
        raise ConfigError(
            f"teacher.kind={t.kind} labels independent episodes, and rollout.mode="
            f"{cfg.rollout.mode} is not one: set rollout.mode to one of {able}"
        )
    if cfg.algo.filter_groups:
        raise ConfigError(
            f"teacher.kind={t.kind} cannot run with algo.filter_groups=true: it drops whole "
            "groups, and their labelled states with them; set algo.filter_groups=false"
        )


class Teacher(Protocol):
    """Labels a batch of live states with distributions over their candidate actions."""

    def label(self, episodes: Sequence, envs: Sequence, actions: Sequence[list[str]]):
        """One list of K probabilities per state, over `actions[i]` in that order."""
        ...

    def state_key(self, episode, actions: list[str]) -> Hashable | None:
        """What the label depends on (the cache key); None: never cache it."""
        ...


@dataclass(frozen=True)
class TeacherKind:
    """One `teacher.kind`: what `teacher.source` must name and how to build it."""

    name: str
    build: Callable[[TeacherConfig, Any], Teacher]
    """`build(teacher_cfg, train_cfg) -> Teacher`."""
    source: str = ""
    """What `teacher.source` names ("": nothing needed)."""
    example: str = ""
    """An example `teacher.source`, for errors."""


TEACHERS: Registry[TeacherKind] = Registry(
    "teacher.kind", allow_entry_points=True, error=ConfigError
)
"""`teacher.kind` -> `TeacherKind`."""


def get_teacher_kind(name: str, prefix: str = "teacher") -> TeacherKind:
    fix = "register one with TEACHERS.register"
    return TEACHERS.get_record(name, TeacherKind, f"{prefix}.kind", fix, ConfigError)


def action_distribution(answer: Any, actions: list[str], who: str) -> list[float]:
    """A teacher's answer (an action, {action: weight} or K weights) as K probabilities."""
    if isinstance(answer, str):
        answer = {answer: 1.0}
    if isinstance(answer, dict):
        unknown = [a for a in answer if a not in actions]
        if unknown:
            raise ValueError(
                f"teacher {who} answered {unknown}, not among the available actions "
                f"{actions}; answer one of them (exact text)"
            )
        weights = [float(answer.get(a, 0.0)) for a in actions]
    else:
        weights = [float(w) for w in answer]
        if len(weights) != len(actions):
            raise ValueError(
                f"teacher {who} gave {len(weights)} weights for {len(actions)} actions "
                f"{actions}; give one per action, in that order"
            )
    total = sum(weights)
    if not total > 0 or min(weights) < 0:
        raise ValueError(f"teacher {who} gave weights {weights}; they must be >= 0, sum > 0")
    return [w / total for w in weights]


class OracleTeacher:
    """The env's `oracle_action()` (reads the env's state: never cached)."""

    def label(self, episodes, envs, actions):
        out = []
        for env, acts in zip(envs, actions):
            if not hasattr(env, "oracle_action"):
                raise ValueError(
                    f"teacher.kind=oracle: {type(env).__name__} has no oracle_action(); use "
                    "teacher.kind=callable or teacher.kind=model for this env"
                )
            out.append(action_distribution(env.oracle_action(), acts, "oracle"))
        return out

    def state_key(self, episode, actions):
        return None


class CallableTeacher:
    """`fn(observation, actions, info)` (see the module docstring)."""

    def __init__(self, spec: str) -> None:
        self.spec, self.fn = spec, load_entry_point(spec, "teacher.source")

    def label(self, episodes, envs, actions):
        return [
            action_distribution(self.fn(ep.observation, list(a), dict(ep.info)), a, self.spec)
            for ep, a in zip(episodes, actions)
        ]

    def state_key(self, episode, actions):
        return (episode.instruction, episode.observation, tuple(actions))


class ModelTeacher:
    """A model scoring each state's candidates on its own prompt (its own tokenizer)."""

    def __init__(self, t: TeacherConfig, cfg) -> None:
        from dataclasses import replace

        from arborl.generation import make_backend
        from arborl.rollout.action_scoring import ScoringPolicy

        backend, tok = make_backend(t.source, dtype=cfg.model.dtype)
        rollout = replace(cfg.rollout, view="step", temperature=t.temperature, seed=None)
        self.policy = ScoringPolicy(backend, tok, rollout, cfg.agent, name=t.source)

    def _prompt(self, episode) -> tuple:
        prompt, _ = self.policy._prompt(episode)  # the student synced memory: same text
        return tuple(prompt or ())

    def label(self, episodes, envs, actions):
        import math

        states = [(self._prompt(ep), tuple(a)) for ep, a in zip(episodes, actions)]
        scored = self.policy.scored_states(states)
        return [[math.exp(x) for x in s.choice_logp] for s in scored]

    def state_key(self, episode, actions):
        return (self._prompt(episode), tuple(actions))


TEACHERS.register("oracle", TeacherKind("oracle", lambda t, cfg: OracleTeacher()))
TEACHERS.register(
    "callable",
    TeacherKind(
        "callable",
        lambda t, cfg: CallableTeacher(t.source),
        "a Python callable as pkg.module:fn",
        "my_pkg.rules:teacher",
    ),
)
TEACHERS.register(
    "model",
    TeacherKind(
        "model",
        ModelTeacher,
        "a preset name, checkpoint policy dir or HF model dir",
        "smollm2-135m-instruct",
    ),
)


@dataclass
class TeacherCost:
    """What the teacher cost so far (logged as `teacher/*` each step)."""

    calls: int = 0
    """Batched teacher calls (one per turn with a state missing from the cache)."""
    states: int = 0
    """States the teacher labelled (cache misses)."""
    cache_hits: int = 0
    seconds: float = 0.0


class TeacherLabels:
    """A teacher behind a per-state cache: one batched call per turn for the misses."""

    def __init__(self, teacher: Teacher, label: str, cache_size: int) -> None:
        self.teacher, self.hard, self.cache_size = teacher, label == "action", cache_size
        self.cache: dict[Hashable, list[float]] = {}
        self.cost = TeacherCost()

    def __call__(self, episodes: Sequence, envs: Sequence, actions: Sequence[list[str]]):
        """One list of K probabilities per state; the teacher labels each distinct state
        missing from the cache once (episodes of a group share their first state)."""
        t0 = time.perf_counter()
        keys = [
            self.teacher.state_key(ep, a) if self.cache_size else None
            for ep, a in zip(episodes, actions)
        ]
        out: list[list[float] | None] = [self.cache.get(k) if k is not None else None for k in keys]
        ask: dict[Hashable, int] = {}  # key (or the row, uncacheable) -> index in the call
        rows = [i for i, p in enumerate(out) if p is None]
        for i in rows:
            ask.setdefault(keys[i] if keys[i] is not None else ("row", i), i)
        self.cost.cache_hits += len(keys) - len(ask)
        if ask:
            first = list(ask.values())
            labels = self.teacher.label(
                [episodes[i] for i in first], [envs[i] for i in first], [actions[i] for i in first]
            )
            if len(self.cache) + len(first) > self.cache_size:
                self.cache.clear()
            got = {i: self._hard(p) if self.hard else list(p) for i, p in zip(first, labels)}
            for i in rows:
                out[i] = got[ask[keys[i] if keys[i] is not None else ("row", i)]]
            for i in first:
                if keys[i] is not None:
                    self.cache[keys[i]] = got[i]
            self.cost.calls += 1
            self.cost.states += len(first)
        self.cost.seconds += time.perf_counter() - t0
        return out

    @staticmethod
    def _hard(p: Sequence[float]) -> list[float]:
        best = max(range(len(p)), key=lambda k: p[k])  # first of ties
        return [1.0 if k == best else 0.0 for k in range(len(p))]


def build_teacher_labels(cfg) -> TeacherLabels:
    """The run's teacher (`cfg.teacher`), cached, from its `TEACHERS` record."""
    t = cfg.teacher
    teacher = get_teacher_kind(t.kind).build(t, cfg)
    return TeacherLabels(teacher, t.label, t.cache_size)
