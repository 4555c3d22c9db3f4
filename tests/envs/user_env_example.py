"""A minimal user env, kept in its own file as a user would: guess a hidden digit.

Registered in the tests with `register("user/GuessDigit-v0", "<module>:GuessDigitEnv")`
or directly with the class object.
"""

from __future__ import annotations

from arborl.envs import TextEnv
from arborl.envs.splits import sample_in_split, task_id_of


class GuessDigitEnv(TextEnv):
    """Guess a digit 0-9; the feedback says higher or lower. Reward 1 on the right digit."""

    description = "Guess the hidden digit (0-9) from higher/lower hints."
    action_format = "a digit 0-9"
    default_max_turns = 5
    _state_attrs = ("last",)

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        super().__init__(split=split, max_turns=max_turns)
        self.last: int | None = None

    def _sample_task(self, rng, split):
        return sample_in_split(
            rng, split, lambda r: {"digit": r.randint(0, 9), "salt": r.randint(0, 99)}
        )

    def _task_id(self, task):
        return task_id_of(task)

    def _start(self, task):
        self.last = None
        return "Guess a digit."

    def _act(self, action):
        a = action.strip()
        if len(a) != 1 or not a.isdigit():
            return "Reply with one digit.", 0.0, False, False
        self.last = int(a)
        digit = self.task["digit"]
        if self.last == digit:
            return "Correct!", 1.0, True, True
        return ("higher" if digit > self.last else "lower"), 0.0, False, True

    def _won(self):
        return self.last == self.task["digit"]

    def _anchor(self):
        return (self._task_id(self.task), self.last)

    def _available_actions(self):
        return [str(d) for d in range(10)]

    def oracle_action(self):
        return str(self.task["digit"])  # the expert may read the hidden task
