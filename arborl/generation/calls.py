"""The gateway's record of one model call (docs/agents.md, "The record"), and its JSONL form.

    calls = gateway.close_session(s.id)          # list[CallRecord], ordered by `call`
    for prompt_ids, choice in calls[0].rows():   # one training row per sampled choice
        ...
    append_call(path, record)                    # `arborl serve --record DIR` writes these
    read_calls(path)                             # and reads them back (old files too)

`append_call` and `read_calls` are the one pair that writes and reads the JSONL files, so
what the gateway records and what SFT or a reward function reads cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CallChoice:
    """One sampled answer of a call."""

    response_ids: list[int]
    """The ids the policy sampled (the end-of-turn token included when it was sampled)."""
    logprobs: list[float]
    """The sampling logprob of each of `response_ids`."""
    finish_reason: str
    """Why generation stopped: `stop` or `length`."""
    text: str = ""
    """The decoded answer (stop strings cut)."""
    content: str | None = None
    """Chat: the answer's text outside its tool calls (None for a completion)."""
    tool_calls: list[dict[str, Any]] | None = None
    """Chat: the OpenAI `tool_calls` parsed from `text` (None for a completion)."""
    tool_call_error: str | None = None
    """Why an attempted tool call did not parse (None: none did, or none was tried)."""


@dataclass(frozen=True)
class CallRecord:
    """One model call of one session, token-exact."""

    session: str
    """The session (episode) it belongs to."""
    call: int
    """Its index among the session's calls (0, 1, ...: their order)."""
    weight_version: int
    """How many weight updates the served model had seen (`gateway.WeightVersion`)."""
    started: float
    """Unix time it was admitted."""
    ended: float
    """Unix time it finished."""
    kind: str
    """`chat` (`/v1/chat/completions`) or `completion` (`/v1/completions`)."""
    request: dict[str, Any]
    """What was asked: chat `{"messages", "tools", "tool_choice"}`, completion `{"prompt"}`."""
    sampling: dict[str, Any]
    """The sampling used: temperature, top_p, top_k, max_tokens, stop, seed, row_seeds."""
    prompt_ids: list[list[int]]
    """One id list per prompt (chat: one), exactly as the policy was given them."""
    n: int
    """Choices per prompt: choice `j` answers prompt `j // n`."""
    choices: list[CallChoice]
    """Every sampled answer, prompt by prompt."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What the session's opener attached (task, episode index)."""

    def rows(self) -> Iterator[tuple[list[int], CallChoice]]:
        """(prompt ids, choice) for each choice: one training row each."""
        for j, choice in enumerate(self.choices):
            yield self.prompt_ids[j // self.n], choice

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (one line of a record file)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "call record") -> CallRecord:
        """The record of `data` (`to_dict`'s, or an older file's line: `n` defaults to 1,
        `meta` to {}, a choice's chat fields to None; unknown keys are ignored)."""
        data = {**data, "n": max(1, int(data.get("n", 1)))}
        missing = [f.name for f in fields(cls) if f.name not in data and f.name != "meta"]
        if missing:
            raise ValueError(f"{where} lacks {missing}: not a gateway call record")
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        keys = {f.name for f in fields(CallChoice)}
        choices = [{k: v for k, v in c.items() if k in keys} for c in data["choices"]]
        kept["choices"] = [CallChoice(**c) for c in choices]
        return cls(**kept)


def append_call(path: str | Path, record: CallRecord) -> None:
    """Append `record` to the JSONL file `path` (its folder made if need be)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record.to_dict()) + "\n")


def read_calls(path: str | Path) -> list[CallRecord]:
    """The records of the JSONL file `path`, in file order (call order); blank lines are
    skipped; a line that is no record raises `ValueError` naming it."""
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            out.append(CallRecord.from_dict(json.loads(line), f"{path}:{i}"))
    return out
