"""Your own tasks, from a JSONL file, with no env to write: `arborl/Tasks-v0`.

One JSON object a line:

    {"prompt": "What is the price of milk today?", "data": {"prices": {"milk": 42}},
     "answer": "42", "id": "milk", "split": "train"}

`prompt` (required) is the task text: the first observation and the instruction, so the
report shows it; `data` (any JSON, optional) is what the task hides from the model (a
table its tools read); `answer` (optional) is the reference; `id` (default: a digest of
the prompt) names the task; `split` (train, val or test, optional) holds tasks out. A
file whose rows name no split uses every row in every split, and then the "held-out"
evaluation runs the training tasks (say so where you report it).

Meant for `rollout.mode=program` (docs/agents.md, "Your own tasks"): the agent program gets
the row as `task["data"]`, and its reward is its own (a number), `agent_program.reward`'s,
or this env's exact match of the answer string it returns: the answer and `answer`,
stripped, case- and whitespace-folded, are equal, or both parse as the same number;
reward 1 and won, else 0. One answer ends the episode; a reply that is no answer at all
(blank, control characters, over 1000 characters, not a number where `answer` is one) is
an invalid action. Its "oracle" only reads `answer`, and free text has no action space, so
the env registers `baselines=False`: no random or oracle line in the report.

    arborl train rollout.mode=program env.id=arborl/Tasks-v0 env.kwargs.path=my_tasks.jsonl \\
      agent_program.fn=my_agent:run ...
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path
from typing import Any

from arborl.envs.base import SPLITS, TextEnv
from arborl.envs.builtin._safe_calc import parse_number

EXAMPLE = Path(__file__).parent / "data" / "shop_tasks.jsonl"
"""The file used when no `path` is given: five price look-ups (3 train, 2 test)."""
MAX_ANSWER_CHARS = 1000


def read_tasks(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a task file, checked: each a JSON object with a string `prompt`, a
    known `split` if any; `id` filled in. Errors name the file, the line and the fix."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"task file {str(path)!r} does not exist; give env.kwargs.path=<your .jsonl>"
        )
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e})") from e
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ValueError(
                f'{where}: expected an object with a string "prompt", got {line[:80]!r}'
            )
        if row.get("split") is not None and row["split"] not in SPLITS:
            raise ValueError(f"{where}: split={row['split']!r} is not one of {SPLITS}")
        row.setdefault("id", hashlib.sha256(row["prompt"].encode()).hexdigest()[:12])
        rows.append(row)
    if not rows:
        raise ValueError(f"task file {path} has no tasks; write one JSON object a line")
    return rows


def same_answer(given: str, reference: Any) -> bool:
    """The exact-match default: equal once stripped and case- and whitespace-folded, or
    both the same number."""
    fold = " ".join(str(given).split()).casefold()
    if fold == " ".join(str(reference).split()).casefold():
        return True
    a, b = parse_number(str(given)), parse_number(str(reference))
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def comparable(given: str, reference: Any) -> bool:
    """Is `given` an answer at all: 1-1000 characters, not blank, no control characters,
    and a number where the reference is one. Anything else is an invalid action."""
    text = str(given).strip()
    if not text or len(text) > MAX_ANSWER_CHARS or any(ord(c) < 32 for c in text):
        return False
    numeric = reference is not None and parse_number(str(reference)) is not None
    return not numeric or parse_number(text) is not None


class TaskListEnv(TextEnv):
    """A task from a JSONL file of yours per reset (see the module docstring)."""

    env_id = "arborl/Tasks-v0"
    description = "Your own tasks from a JSONL file: the prompt, then one answer."
    action_format = "the answer"
    default_max_turns = 2  # a reply that is not an answer gets one retry
    _state_attrs = ("answered", "correct")

    def __init__(self, split: str = "train", max_turns: int | None = None, path: str = "") -> None:
        super().__init__(split, max_turns)
        self.path = str(path or EXAMPLE)
        rows = read_tasks(self.path)
        has_splits = any(r.get("split") for r in rows)
        self.rows = {s: [r for r in rows if not has_splits or r.get("split") == s] for s in SPLITS}
        self.answered = self.correct = False

    def _sample_task(self, rng: random.Random, split: str) -> dict[str, Any]:
        rows = self.rows[split]
        if not rows:
            raise ValueError(f"task file {self.path} has no rows with split={split!r}")
        return rows[rng.randrange(len(rows))]

    def _task_id(self, task: dict[str, Any]) -> str:
        return str(task["id"])

    def _start(self, task: dict[str, Any]) -> str:
        self.answered = self.correct = False
        return task["prompt"]

    def _instruction(self, task: dict[str, Any]) -> str:
        return task["prompt"]

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        if not comparable(action, self.task.get("answer")):  # not an answer: try again
            return "not an answer: reply with the answer only", 0.0, False, False
        self.answered = True
        self.correct = "answer" in self.task and same_answer(action, self.task["answer"])
        return ("correct" if self.correct else "wrong"), float(self.correct), True, True

    def oracle_action(self) -> str:
        """The row's `answer` (for `arborl env play` and the checks; no baseline line)."""
        if "answer" not in self.task:
            raise NotImplementedError(f"task {self.task['id']!r} of {self.path} has no answer")
        return str(self.task["answer"])

    def _anchor(self) -> tuple:
        return (self.task["id"], self.answered, self.correct)

    def _won(self) -> bool:
        return self.correct
