"""Wordle: guess a secret 5-letter word in six tries from per-letter colour feedback.

The secret and every allowed guess come from `data/wordle_words.txt` (about 1,500 common
words shipped in the repo), so the task space is small, fully known and the same on every
machine. Feedback follows the official rules, including repeated letters: exact matches are
marked first (G), then each remaining letter of the guess is marked Y only while the secret
still has an unmatched copy of it, else _. The oracle is a candidate-filtering solver: it
keeps the words consistent with all feedback so far and picks the guess that splits them
into the most feedback classes (a fixed, precomputed opening word first).
"""

from __future__ import annotations

import functools
import random
import re
from pathlib import Path
from typing import Any

from arborl.envs.base import TextEnv
from arborl.envs.splits import sample_in_split, task_id_of

WORD_FILE = Path(__file__).parent / "data" / "wordle_words.txt"
WORD_LENGTH = 5
SOLVED = "G" * WORD_LENGTH
FIRST_GUESS = "trace"
"""The opening word with the most feedback classes over the word list (see tests)."""
_ALL_WORDS_BELOW = 30
"""Search guesses among all words (not only candidates) once this few candidates are left."""
_MAX_POOL = 150
"""Most guesses scored per oracle move (keeps a move under ~50 ms)."""

_ACTION_RE = re.compile(r"^\s*(?:guess\s*\[\s*([^\]]*?)\s*\]|([A-Za-z]+))\s*$", re.IGNORECASE)


@functools.lru_cache(maxsize=1)
def words() -> tuple[str, ...]:
    """The word list, sorted (secrets and allowed guesses)."""
    lines = WORD_FILE.read_text(encoding="utf-8").splitlines()
    return tuple(w.strip() for w in lines if w.strip() and not w.startswith("#"))


@functools.lru_cache(maxsize=1)
def _word_set() -> frozenset[str]:
    return frozenset(words())


def feedback(guess: str, secret: str) -> str:
    """Per-letter marks of `guess` against `secret`: G right place, Y elsewhere, _ absent.

    >>> feedback("paper", "apple")
    'YYGY_'
    """
    marks = ["_"] * WORD_LENGTH
    unmatched: dict[str, int] = {}
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            marks[i] = "G"
        else:
            unmatched[s] = unmatched.get(s, 0) + 1
    for i, g in enumerate(guess):
        if marks[i] != "G" and unmatched.get(g, 0) > 0:
            marks[i] = "Y"
            unmatched[g] -= 1
    return "".join(marks)


def candidates(history: list[tuple[str, str]], pool: tuple[str, ...] | None = None) -> list[str]:
    """The words of `pool` (default: the list) consistent with every (guess, marks) pair."""
    return [w for w in (pool or words()) if all(feedback(g, w) == m for g, m in history)]


def best_guess(history: list[tuple[str, str]], hard_mode: bool = False) -> str:
    """The solver's next guess: the one that splits the remaining candidates most finely.

    Ties go to a word that could be the secret, then to the earliest word in list order.
    """
    return _best_guess(tuple((g, m) for g, m in history), bool(hard_mode))


@functools.lru_cache(maxsize=4096)  # early positions repeat across games: cache them
def _best_guess(history: tuple[tuple[str, str], ...], hard_mode: bool) -> str:
    if not history:
        return FIRST_GUESS
    cands = candidates(list(history))
    if len(cands) <= 2:
        return cands[0]
    pool = list(words()) if len(cands) <= _ALL_WORDS_BELOW and not hard_mode else cands
    cand_set = set(cands)
    best, best_score = cands[0], (-1, False)
    for guess in pool[:_MAX_POOL] if len(pool) > _MAX_POOL else pool:
        score = (len({feedback(guess, s) for s in cands}), guess in cand_set)
        if score > best_score:
            best, best_score = guess, score
    return best


def _render(guess: str, marks: str) -> str:
    return " ".join(f"{c}:{m}" for c, m in zip(guess, marks))


class WordleEnv(TextEnv):
    """Guess the secret word; reward 1 when a guess matches it, within `max_turns` tries."""

    env_id = "arborl/Wordle-v0"
    description = "Guess the secret 5-letter English word in at most 6 guesses."
    action_format = "guess[<word>] (a bare 5-letter word is also accepted)"
    default_max_turns = 6
    _state_attrs = ("secret", "history", "solved")

    def __init__(
        self, hard_mode: bool = False, split: str = "train", max_turns: int | None = None
    ) -> None:
        """`hard_mode`: every guess must be consistent with all feedback given so far."""
        super().__init__(split=split, max_turns=max_turns)
        self.hard_mode = bool(hard_mode)
        self.secret = ""
        self.history: list[tuple[str, str]] = []  # (guess, marks) of valid guesses
        self.solved = False

    def _sample_task(self, rng: random.Random, split: str) -> dict[str, Any]:
        return sample_in_split(rng, split, lambda r: {"secret": r.choice(words())})

    def _task_id(self, task: dict[str, Any]) -> str:
        return task_id_of(task)

    def _start(self, task: dict[str, Any]) -> str:
        secret = str(task.get("secret", "")).strip().lower()
        if secret not in _word_set():
            raise ValueError(
                f"Wordle task field 'secret'={task.get('secret')!r} is not in the word list "
                f"{WORD_FILE}; use one of its {len(words())} words"
            )
        self.secret, self.history, self.solved = secret, [], False
        return (
            f"Guess the secret 5-letter word. You have {self.max_turns} guesses. Reply guess[word]."
        )

    def _instruction(self, task: dict[str, Any]) -> str:
        hard = " Hard mode: each guess must fit all the feedback so far." if self.hard_mode else ""
        return (
            f"{self.description} Action: guess[word], e.g. guess[crane]; the word must be in "
            "the game's list of common words. After each guess every letter is marked "
            "G (right letter, right place), Y (in the word, elsewhere) or _ (not in the word; "
            f"or no further copies of it).{hard} Reward 1 for finding the word."
        )

    def _parse(self, action: str) -> tuple[str | None, str]:
        """(the guessed word, "") or (None, feedback saying what is wrong)."""
        match = _ACTION_RE.match(action)
        if match is None:
            return None, f"Invalid action {action[:60]!r}: reply guess[word], e.g. guess[crane]."
        word = (match.group(1) if match.group(1) is not None else match.group(2)).lower()
        if len(word) != WORD_LENGTH or not word.isascii() or not word.isalpha():
            return None, f"Invalid guess {word[:40]!r}: it must be 5 letters a-z."
        if word not in _word_set():
            return None, f"Invalid guess {word!r}: not in the word list; try another word."
        if self.hard_mode and any(feedback(g, word) != m for g, m in self.history):
            return None, f"Invalid guess {word!r}: hard mode needs a guess that fits all hints."
        return word, ""

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        word, error = self._parse(action)
        left = self.max_turns - self.turn - 1  # guesses left after this turn
        if word is None:
            return f"{error} Guesses left: {left}.", 0.0, False, False
        marks = feedback(word, self.secret)
        self.history.append((word, marks))
        if marks == SOLVED:
            self.solved = True
            return (
                f"{_render(word, marks)}\nSolved in {len(self.history)} guesses!",
                1.0,
                True,
                True,
            )
        board = "\n".join(_render(g, m) for g, m in self.history)
        tail = (
            f"Guesses left: {left}."
            if left > 0
            else f"No guesses left; the word was {self.secret}."
        )
        return f"Board:\n{board}\n{tail}", 0.0, False, True

    def _anchor(self) -> tuple:
        # The feedback known depends on which words were guessed, not on their order.
        return (self._task_id(self.task), tuple(sorted({g for g, _ in self.history})))

    def _won(self) -> bool:
        return self.solved

    def oracle_action(self) -> str:
        """The candidate-filtering solver's next guess from the feedback so far."""
        return f"guess[{best_guess(self.history, self.hard_mode)}]"
