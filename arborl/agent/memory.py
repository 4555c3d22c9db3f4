"""Per-episode memory: which past turns a rebuilt (`step`-view) prompt shows.

Each episode owns one memory object (never shared across episodes, unlike a shared file
memory that leaks rollouts into each other). Strategies are found by name in `MEMORIES`
(`arborl.agent.config`, so a config is checked without importing them). The summary
strategy is deterministic: a rule-based text by default, or a user hook; it never calls a
remote model, so the observation function stays stationary during RL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from arborl.agent.config import MEMORIES, AgentConfig
from arborl.registry import load_entry_point


@dataclass
class MemoryView:
    """What the prompt shows of the past."""

    turns: list[tuple[str, str]] = field(default_factory=list)
    """(observation, response) pairs, oldest first, rendered as user/assistant messages."""
    note: str | None = None
    """Free text put before the current observation (e.g. a summary)."""


class Memory(Protocol):
    """One episode's memory."""

    def add(self, observation: str, response: str) -> None:
        """Record a finished turn: the observation shown and the response given."""
        ...

    def view(self) -> MemoryView:
        """The past as the next prompt shows it."""
        ...


class FullMemory:
    """Every past turn."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.turns: list[tuple[str, str]] = []

    def add(self, observation: str, response: str) -> None:
        self.turns.append((observation, response))

    def view(self) -> MemoryView:
        return MemoryView(turns=list(self.turns))


class LastKMemory(FullMemory):
    """The last `cfg.memory_k` turns (a sliding window)."""

    def __init__(self, cfg: AgentConfig) -> None:
        super().__init__(cfg)
        self.k = cfg.memory_k

    def add(self, observation: str, response: str) -> None:
        super().add(observation, response)
        if len(self.turns) > self.k:
            del self.turns[: len(self.turns) - self.k]

    def view(self) -> MemoryView:
        return MemoryView(turns=list(self.turns[-self.k :] if self.k else []))


def rule_based_summary(previous: str, observation: str, response: str, turn: int) -> str:
    """The default summary: turn count, the last observation and the last response."""
    last_obs = " / ".join(line.strip() for line in observation.strip().splitlines() if line)
    return f"turns so far: {turn}; last observation: {last_obs}; last action: {response.strip()}"


def _resolve_summary_fn(spec: Callable[..., str] | str | None) -> Callable[..., str]:
    if spec is None:
        return rule_based_summary
    if callable(spec):
        return spec
    try:
        return load_entry_point(spec, "agent.summary_fn")
    except (ValueError, ImportError, AttributeError) as e:
        raise ValueError(
            f"{e}; agent.summary_fn cannot be loaded: give 'module:function' of an importable "
            "function (previous_summary, observation, response, turn) -> str"
        ) from e


class SummaryMemory:
    """A running summary, updated once per turn by `cfg.summary_fn`; no past turns shown."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.fn = _resolve_summary_fn(cfg.summary_fn)
        self.summary = ""
        self.num_turns = 0

    def add(self, observation: str, response: str) -> None:
        self.num_turns += 1
        self.summary = str(self.fn(self.summary, observation, response, self.num_turns))

    def view(self) -> MemoryView:
        return MemoryView(turns=[], note=self.summary or None)


def make_memory(cfg: AgentConfig) -> Memory:
    """A fresh memory for one episode (the `MEMORIES` strategy `cfg.memory` names)."""
    return MEMORIES.get(cfg.memory)(cfg)
