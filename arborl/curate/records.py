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

import copy
import json
import marshal
import os
import pickle
import tempfile
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from arborl.agent.config import AgentConfig
from arborl.agent.parsing import parse_action
from arborl.curate.minhash import normalize, text_digest
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


class Record:
    """One row and its provenance as it moves through the stages.

    A record starts with its `Trajectory` in memory. The pipeline then `spool`s it: the
    trajectory goes to a `RowStore` on disk and the record keeps only what the stages
    sort and group by (outcome, return, ids, the instruction's key), so memory holds a few
    hundred bytes per row whatever the row's size. `traj` reads a spooled row back (a
    fresh object each time: change it freely)."""

    __slots__ = ("_traj", "_store", "_offset", "file", "row", "domain", "score", "split",
                 "mix_copy", "_summary", "_instruction_key")  # fmt: skip

    def __init__(self, traj: Trajectory, file: str, row: int, domain: str,
                 score: float | None = None, split: str | None = None) -> None:  # fmt: skip
        self._traj: Trajectory | None = traj
        self._store: RowStore | None = None
        self._offset = -1
        self.file = file
        """The input file (relative to the working directory when under it)."""
        self.row = row
        """Row number in the file: the line of a JSONL file, 1-based for .json and parquet."""
        self.domain = domain
        """The domain that mixing and stratified splits group by."""
        self.score = score
        """Quality score (None: not scored)."""
        self.split = split
        """The curated split, once assigned."""
        self.mix_copy = 0
        """For a copy `mix.upsample` made: its number (1, 2, ...), else 0."""
        self._summary: tuple | None = None  # `_summarize(traj)`, once spooled
        self._instruction_key: bytes | None = None

    # What the stages sort and group by: read from the trajectory while it is in memory,
    # from the summary kept at `spool` time after.
    @property
    def won(self) -> bool:
        return self._traj.won if self._traj is not None else self._summary[0]

    @property
    def total_return(self) -> float:
        return self._traj.total_return if self._traj is not None else self._summary[1]

    @property
    def num_steps(self) -> int:
        return self._traj.num_steps if self._traj is not None else self._summary[2]

    @property
    def task_id(self) -> str:
        return self._traj.task_id if self._traj is not None else self._summary[3]

    @property
    def env_id(self) -> str:
        return self._traj.env_id if self._traj is not None else self._summary[4]

    @property
    def input_split(self) -> str | None:
        """The split the row's input gave it: an explicit source label first; `split` of
        an arborl rollout is its env split."""
        if self._traj is None:
            return self._summary[5]
        m = self._traj.meta
        return m.get("source_split") or m.get("curated_split") or m.get("split")

    @property
    def traj(self) -> Trajectory:
        """The row as a trajectory (read back from the store once spooled)."""
        if self._traj is not None:
            return self._traj
        t = self._store.load(self._offset)  # type: ignore[union-attr]
        if self.mix_copy:
            t.meta["mix_copy"] = self.mix_copy
        return t

    def fresh_traj(self) -> Trajectory:
        """`traj` as an object of its own (a copy while it is held in memory)."""
        return copy.deepcopy(self._traj) if self._traj is not None else self.traj

    def spool(self, store: RowStore) -> None:
        """Move the trajectory to `store`, keeping only the fields the stages read (unless
        the store still has room in memory for it: then it stays here)."""
        t = self._traj
        if t is None or store.hold(t):
            return
        self._instruction_key = self.instruction_key  # computed while `t` is in memory
        self._summary = (t.won, t.total_return, t.num_steps, t.task_id, t.env_id,
                         self.input_split)  # fmt: skip
        self._offset, self._store, self._traj = store.append(t), store, None

    def mixed_copy(self, number: int) -> Record:
        """A copy for upsampling, marked `meta['mix_copy'] = number`."""
        c = copy.copy(self)
        c.mix_copy = number
        if c._traj is not None:
            c._traj = copy.deepcopy(c._traj)
            c._traj.meta["mix_copy"] = number
        return c

    @property
    def instruction_key(self) -> bytes:
        """A digest of the normalised instruction (b"" for none), what splits group by."""
        if self._traj is not None:  # in memory: what the trajectory says now
            own = normalize(self._traj.instruction)
            return text_digest(own) if own else b""
        return self._instruction_key  # type: ignore[return-value]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.row}"

    @property
    def task_key(self) -> tuple[str, str]:
        """(env id, task id): a task id is only unique within its env."""
        return (self.env_id, self.task_id)


class RowStore:
    """Where the curation pipeline's rows live: in memory up to `max_memory_bytes` of
    estimated object size (`estimated_bytes`), on disk after that, in an unnamed temporary
    file (deleted when closed or collected) read back by offset. Rows go to disk as
    `marshal` data (JSON-like values: 2-3x faster than pickle), or a pickle for a value
    marshal cannot hold; written and read by this process only, so no input is ever
    unpickled (rows are parsed from their formats first)."""

    def __init__(self, folder: str | os.PathLike | None = None,
                 max_memory_bytes: int = 0) -> None:  # fmt: skip
        self.folder, self.max_memory_bytes = folder, max_memory_bytes
        self._file: Any = None  # opened on the first row that does not fit in memory
        self._end = 0
        self.held_bytes = 0
        """Estimated size of the rows `hold` kept in memory."""
        self.num_rows = 0
        """Rows written to disk."""

    def hold(self, traj: Trajectory) -> bool:
        """Whether `traj` fits in the memory budget (then it is counted, and its record
        keeps it); once one row does not fit, no later one does either."""
        if self._file is not None:
            return False
        size = estimated_bytes(traj)
        if self.held_bytes + size > self.max_memory_bytes:
            return False
        self.held_bytes += size
        return True

    def append(self, traj: Trajectory) -> int:
        """Write `traj` to disk; returns its offset for `load`."""
        if self._file is None:
            self._file = tempfile.TemporaryFile(dir=self.folder, prefix=".arborl-curate-rows-")
        t = traj
        try:
            steps = [(s.observation, s.action, s.reward, s.terminated, s.truncated, s.info,
                      s.response) for s in t.steps]  # fmt: skip
            blob = b"m" + marshal.dumps((t.task_id, t.env_id, t.seed, t.instruction, steps,
                                         t.won, t.meta))  # fmt: skip
        except ValueError:  # a value marshal cannot write (not from a JSON-like source)
            blob = b"p" + pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL)
        offset = self._end
        self._file.seek(offset)
        self._file.write(len(blob).to_bytes(8, "little") + blob)
        self._end += 8 + len(blob)
        self.num_rows += 1
        return offset

    def load(self, offset: int) -> Trajectory:
        """The trajectory written at `offset`, as a new object."""
        self._file.seek(offset)
        size = int.from_bytes(self._file.read(8), "little")
        blob = self._file.read(size)
        if blob[:1] == b"p":
            return pickle.loads(blob[1:])
        task_id, env_id, seed, instruction, steps, won, meta = marshal.loads(blob[1:])
        return Trajectory(task_id, env_id, seed, instruction, [Step(*s) for s in steps], won,
                          meta)  # fmt: skip

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def estimated_bytes(t: Trajectory) -> int:
    """A rough size of `t` as Python objects: its text plus a fixed cost per object (a
    step with its dicts is ~0.5 KB; the trajectory with its meta ~0.6 KB)."""
    size = 600 + len(t.instruction) + 100 * len(t.meta)
    for s in t.steps:
        size += 500 + len(s.observation) + len(s.action) + len(s.response or "")
        size += 100 * len(s.info)
    return size


class LazyTexts(Sequence[str]):
    """`fn(record)` of each record, computed when asked for: the texts the stages compare,
    without holding all of them at once. The texts of rows held in memory are kept; of
    spooled rows, only the most recent few (`keep`, `keep_chars`)."""

    def __init__(self, records: Sequence[Record], fn: Callable[[Record], str],
                 keep: int = 256, keep_chars: int = 1 << 22) -> None:  # fmt: skip
        self.records, self.fn, self.keep, self.keep_chars = records, fn, keep, keep_chars
        self._held: dict[int, str] = {}
        self._recent: dict[int, str] = {}
        self._chars = 0

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        text = self._held.get(i) or self._recent.get(i)
        if text is None:
            r = self.records[i]
            text = self.fn(r)
            if r._traj is not None:  # a row held in memory anyway: keep its text as well
                self._held[i] = text
                return text
            self._chars += len(text)
            self._recent[i] = text
            while len(self._recent) > self.keep or self._chars > self.keep_chars:
                self._chars -= len(self._recent.pop(next(iter(self._recent))))  # the oldest
        return text

    def __iter__(self) -> Iterator[str]:
        for r in self.records:  # streaming: nothing kept
            yield self.fn(r)


class Subset(Sequence[str]):
    """`texts[indices[k]]` for k in range(len(indices)), without copying the texts."""

    def __init__(self, texts: Sequence[str], indices: Sequence[int]) -> None:
        self.texts, self.indices = texts, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        return self.texts[self.indices[k]]


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

        rows = (r for b in pq.ParquetFile(path).iter_batches(1024) for r in b.to_pylist())
        yield from enumerate(rows, 1)  # a batch of rows at a time
    else:
        raise ValueError(
            f"input {str(path)!r} has suffix {path.suffix!r}; use .jsonl, .json or .parquet"
        )


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
