"""Rows, their provenance, and the Trajectory <-> chat-messages mapping every format shares.

Every input row becomes a `Record`: the `Trajectory` plus where it came from (file, row
number) and its domain, so each later stage can say which row it dropped and why. A row
that cannot be read raises `FieldError` (naming the field) inside a format parser; the
reader turns it into a `MalformedRow` with file and row, which is either counted or, in
strict mode, raised.

The chat mapping is the lossless core of the ShareGPT, OpenAI and verl formats: an
optional system message is the instruction, each step is (user = observation,
assistant = response or action), and a trailing user message is the final observation
(kept in `meta['final_observation']`; prompt-only task rows are exactly that).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from arborl.agent.config import AgentConfig
from arborl.agent.parsing import parse_action
from arborl.data import Step, Trajectory

USER_ROLES = ("user", "human", "observation", "tool")
ASSISTANT_ROLES = ("assistant", "gpt", "function_call")
SYSTEM_ROLES = ("system",)


class FieldError(ValueError):
    """A row's field is missing or wrong; `field` is its path inside the row."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"field {field!r}: {reason}")
        self.field, self.reason = field, reason


class MalformedRow(ValueError):
    """A row that could not be read, with where it is and what is wrong."""

    def __init__(self, file: str, row: int, field: str, reason: str) -> None:
        super().__init__(
            f"{file} row {row}: field {field!r}: {reason} (fix the row, or run without "
            "--strict to skip and count malformed rows)"
        )
        self.file, self.row, self.field, self.reason = file, row, field, reason

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "row": self.row, "field": self.field, "reason": self.reason}


@dataclass
class Record:
    """One trajectory and its provenance as it moves through the stages."""

    traj: Trajectory
    """The row as a trajectory."""
    file: str
    """The input file (relative to the working directory when under it)."""
    row: int
    """Row number in the file: the line of a JSONL file, 1-based for .json and parquet."""
    domain: str
    """The domain that mixing and stratified splits group by."""
    score: float | None = None
    """Quality score (None: not scored)."""
    split: str | None = None
    """The curated split, once assigned."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.row}"

    @property
    def task_key(self) -> tuple[str, str]:
        """(env id, task id): a task id is only unique within its env."""
        return (self.traj.env_id, self.traj.task_id)


def display_path(path: str | os.PathLike) -> str:
    """`path` relative to the working directory when under it (reports hold no absolute
    paths of the machine that made them)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _jsonl_row(raw: bytes) -> Any:
    """One JSONL line as a row, or a `FieldError` for bytes that are not UTF-8 or not
    JSON (never decoded with replacement characters: that would alter the text)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return FieldError(
            "(encoding)", f"not UTF-8: byte {raw[e.start]:#04x} at column {e.start + 1}"
        )
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        return FieldError("(json)", f"not valid JSON: {e.msg} at column {e.colno}")
    except RecursionError:
        return FieldError("(json)", "nested too deeply")


def iter_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number, raw row) of a .jsonl (line numbers), .json list or .parquet (1-based).
    A line that is not UTF-8 or not JSON yields a `FieldError` in place of the row; a
    file that cannot be read at all raises `OSError` or `ValueError`."""
    if path.suffix == ".jsonl":
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if raw.strip():
                    yield (
                        lineno,
                        _jsonl_row(raw.removeprefix(b"\xef\xbb\xbf") if lineno == 1 else raw),
                    )
    elif path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json input must hold a list of rows, got {type(data)}")
        yield from enumerate(data, 1)
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from enumerate(pq.read_table(path).to_pylist(), 1)
    else:
        raise ValueError(
            f"input {str(path)!r} has suffix {path.suffix!r}; use .jsonl, .json or .parquet"
        )


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` through a temp file in the same folder, then rename."""
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def atomic_write(path: Path, write: Callable[[Path], Any]) -> Path:
    """`write(tmp)` then rename onto `path`: a crash never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- actions ---------------------------------------------------------------------------
@cache
def _parse_config(action_format: str) -> AgentConfig:
    """One checked AgentConfig per format (building one per turn cost more than parsing)."""
    return AgentConfig(action_format=action_format)


def action_of(text: str, action_format: str) -> tuple[str, bool]:
    """(action, format_ok) of an assistant turn's text in `action_format`, a name of the
    agent's `ACTION_FORMATS` registry (the formats a policy answers in)."""
    parsed = parse_action(text, _parse_config(action_format))
    # A plain turn is kept verbatim (the agent strips what it sends to the env), so that
    # reading data and writing it back changes no text.
    return (text if action_format == "plain" else parsed.action), parsed.format_ok


# --- chat messages ---------------------------------------------------------------------
def trajectory_to_messages(t: Trajectory) -> list[dict[str, Any]]:
    """[system?] (user, assistant)* [user?] messages; assistant turns carry `loss` where the
    source gave one (`meta['turn_loss']`)."""
    msgs: list[dict[str, Any]] = []
    if t.instruction:
        msgs.append({"role": "system", "content": t.instruction})
    losses = t.meta.get("turn_loss") or [None] * len(t.steps)
    for s, loss in zip(t.steps, losses):
        msgs.append({"role": "user", "content": s.observation})
        text = s.action if s.response is None else s.response
        m: dict[str, Any] = {"role": "assistant", "content": text}
        if loss is not None:
            m["loss"] = bool(loss)
        msgs.append(m)
    final = t.meta.get("final_observation")
    if final is not None:
        msgs.append({"role": "user", "content": final})
    return msgs


def messages_to_parts(
    msgs: Any, action_format: str, list_field: str, role_key: str, text_key: str, loss_key: str
) -> tuple[str, list[Step], list[bool | None], str | None]:
    """(instruction, steps, per-step loss, final observation) of a message list; raises
    `FieldError` naming e.g. `conversations[3].from` when the list is not well formed."""
    if not isinstance(msgs, list) or not msgs:
        raise FieldError(list_field, f"expected a non-empty list of messages, got {msgs!r:.60}")
    instruction, steps, losses, pending = "", [], [], None
    for i, m in enumerate(msgs):
        at = f"{list_field}[{i}]"
        if not isinstance(m, dict):
            raise FieldError(at, f"expected a message object, got {m!r:.60}")
        role, text = m.get(role_key), m.get(text_key)
        if not isinstance(text, str):
            raise FieldError(f"{at}.{text_key}", f"expected a string, got {text!r:.60}")
        if role in SYSTEM_ROLES:
            if i != 0:
                raise FieldError(f"{at}.{role_key}", "a system message must come first")
            instruction = text
        elif role in USER_ROLES:
            if pending is not None:
                raise FieldError(
                    f"{at}.{role_key}", "two user turns in a row; expected an assistant turn"
                )
            pending = text
        elif role in ASSISTANT_ROLES:
            if pending is None:
                raise FieldError(
                    f"{at}.{role_key}", "an assistant turn with no user turn before it"
                )
            action, _ = action_of(text, action_format)
            response = None if action == text else text
            steps.append(Step(observation=pending, action=action, response=response))
            loss = m.get(loss_key)
            if loss is not None and not isinstance(loss, bool | int | float):
                raise FieldError(f"{at}.{loss_key}", f"expected a bool or 0/1, got {loss!r:.40}")
            losses.append(None if loss is None else bool(loss))
            pending = None
        else:
            known = SYSTEM_ROLES + USER_ROLES + ASSISTANT_ROLES
            raise FieldError(
                f"{at}.{role_key}", f"unknown role {role!r}; expected one of {list(known)}"
            )
    return instruction, steps, losses, pending


def build_trajectory(
    parts: tuple[str, list[Step], list[bool | None], str | None],
    task_id: str,
    env_id: str,
    won: bool,
    meta: dict[str, Any],
) -> Trajectory:
    instruction, steps, losses, final = parts
    meta = dict(meta)
    if any(v is not None for v in losses):
        meta["turn_loss"] = losses
    if final is not None:
        meta["final_observation"] = final
    return Trajectory(task_id=task_id, env_id=env_id, instruction=instruction, steps=steps,
                      won=won, meta=meta)  # fmt: skip


def prompt_text(t: Trajectory) -> str:
    """The task as the agent first sees it: instruction + first observation."""
    first = t.steps[0].observation if t.steps else t.meta.get("final_observation") or ""
    return f"{t.instruction}\n{first}".strip()


def conversation_text(t: Trajectory) -> str:
    """All text of the episode (what duplicates are judged on)."""
    return "\n".join(m["content"] for m in trajectory_to_messages(t))
