"""Failures are loud: how many of a run's episodes errored, the first reason, and whether
the run learned anything at all.

An episode that errored (an env worker that crashed or timed out, an agent program that
raised, ran past its deadline or gave no reward, a non-finite reward) is left out of the
update and counts as lost in an evaluation. A run where that happened to every episode
still prints success numbers (0.000 -> 0.000, gain +0.000), which read like "RL did
nothing" when nothing ran. So every run keeps a `FailureTally` per phase (the first
evaluation, the RL steps, later evaluations, the last one) and the rows it trained on;
`summary.json["failures"]` holds it, `arborl train` prints "N of M episodes errored
(first error: ...)", the report's header shows the same, and a run that learned nothing
(every episode errored, or no RL step had a row to train on) gets a `verdict`, a `hint`
derived from the first error, and `arborl train` exits with `NOTHING_LEARNED_EXIT`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field

from arborl.report.failures import PHASES, errored_line, verdict_line

log = logging.getLogger("arborl")

NOTHING_LEARNED_EXIT = 3
"""`arborl train`'s exit status when the run finished but learned nothing (1: aborted,
2: a config error or a busy run folder)."""

HINTS: tuple[tuple[str, str], ...] = (
    (
        r"has (\d+) tokens; the limit is (\d+)",
        "the prompts are longer than the model's context ({1} tokens for a {2}-token limit): "
        "use a model with a longer context, or shorten what the agent sends (its system "
        "prompt, tool descriptions, the history it keeps)",
    ),
    (
        r"agent timeout|ran past timeout_s",
        "agent episodes ran out of time: raise agent_program.timeout_s, lower "
        "agent_program.max_concurrent, or make episodes shorter (rollout.max_new_tokens, "
        "fewer calls)",
    ),
    (
        r"timeout|timed out|no reply within",
        "env calls ran out of time: raise env.timeout_s for a slow env, or check its "
        "workers (or servers' logs)",
    ),
    (
        r"no_reward|not a reward|returned None|no reward",
        "the agent gave no reward: return a number, an answer string or a dict with either, "
        "or set agent_program.reward to score episodes from their calls",
    ),
    (
        r"non-finite",
        "a reward was NaN or inf: check the reward sources (reward.sources) and the env's rewards",
    ),
    (
        r"agent crashed|the agent raised|exited with",
        "the agent program failed (the first error says where): fix it, or catch its "
        "failures and return a reward of 0, so a failed attempt trains as a loss instead of "
        "leaving the update",
    ),
    (
        r"",
        "episodes ended by env errors: check the env (or its servers' logs), and raise "
        "env.timeout_s for slow envs",
    ),
)
"""(pattern searched in the first error, hint) in order, the first match wins; `{1}`,
`{2}` are the pattern's groups. Generic on purpose: they read the reason, not the mode."""

NO_SIGNAL_HINT = (
    "no RL step had a row with a learning signal (every group's episodes got the same "
    "reward, train/rows_with_signal 0): start from a policy that sometimes succeeds "
    "(sft.enabled=true, or a demos SFT start), raise rollout.group_size or "
    "rollout.num_tasks, or give a graded reward instead of 0/1"
)


def error_reason(trajectory) -> str:
    """Why an errored trajectory (`arborl.data.Trajectory`) ended: its `meta.env_error`
    (agents, non-finite rewards), else the first step's `info.env_error` (env workers);
    "" when it did not error."""
    meta = trajectory.meta or {}
    if meta.get("truncation_reason") != "env_error":
        return ""
    steps = (s.info or {} for s in trajectory.steps)
    why = meta.get("env_error") or next((i["env_error"] for i in steps if i.get("env_error")), "")
    return str(why or "env error (no reason recorded)")


def first_reason(trajectories) -> str:
    """The first errored trajectory's `error_reason`, or ""."""
    return next((r for t in trajectories if (r := error_reason(t))), "")


def signal_rows(train) -> int:
    """Rows of an update's batch with a non-zero advantage: the rows it learns from (with
    `algo.drop_zero_adv=false` the others reach the loss too, with no gradient)."""
    if not len(train) or "adv" not in train:
        return 0
    return int((train["adv"].abs() > 1e-8).sum())


def hint_for(reason: str) -> str:
    """What to change, read from an error reason (`HINTS`)."""
    for pattern, hint in HINTS:
        m = re.search(pattern, reason, re.IGNORECASE)
        if m:
            return hint.format(None, *m.groups())
    return HINTS[-1][1]


@dataclass
class FailureTally:
    """Errored episodes per phase, the first reason, and the rows the run trained on."""

    episodes: dict[str, int] = field(default_factory=dict)
    """Phase (`PHASES`) -> episodes run."""
    errored: dict[str, int] = field(default_factory=dict)
    """Phase -> episodes that errored."""
    first_error: str = ""
    """The reason of the run's first errored episode ("" if none)."""
    rows_trained: int | None = 0
    """Step rows with a learning signal that reached an update (`signal_rows`, over all
    RL steps); None when
    unknown (resumed from a checkpoint older than the tally)."""

    def add(self, phase: str, episodes: int, errored: int, reason: str) -> None:
        """Count one phase's episodes; an error is logged (run.log) with its reason."""
        self.episodes[phase] = self.episodes.get(phase, 0) + int(episodes)
        self.errored[phase] = self.errored.get(phase, 0) + int(errored)
        if errored and not self.first_error:
            self.first_error = reason or "env error (no reason recorded)"
        if errored and phase != "rl":  # RL steps log their own line (RLTrainer)
            log.warning(
                "%s: %d of %d held-out episodes errored (first error: %s)",
                PHASES[phase],
                errored,
                episodes,
                reason or "none recorded",
            )

    def trained(self, rows: int) -> None:
        """Count the rows one RL step's update trained on."""
        if self.rows_trained is not None:
            self.rows_trained += int(rows)

    @property
    def total(self) -> tuple[int, int]:
        """(errored, episodes) over every phase."""
        return sum(self.errored.values()), sum(self.episodes.values())

    def verdict(self, steps: int) -> str:
        """ "all_errored", "no_rows" (RL steps ran, none trained a row) or "" (a result)."""
        errored, episodes = self.total
        if episodes and errored == episodes:
            return "all_errored"
        if steps and self.rows_trained == 0:
            return "no_rows"
        return ""

    def report(self, steps: int) -> dict:
        """`summary.json["failures"]`: the counts, the first error, the verdict (after
        `steps` RL steps) and the hint; the errored line and the verdict go to run.log."""
        errored, episodes = self.total
        verdict = self.verdict(steps)
        hint = ""
        if verdict == "no_rows" and not self.first_error:
            hint = NO_SIGNAL_HINT
        elif verdict:
            hint = hint_for(self.first_error)
        out = {
            **self.state(),
            "total_episodes": episodes,
            "total_errored": errored,
            "verdict": verdict,
            "hint": hint,
        }
        for line in (errored_line(out), verdict_line(out)):
            if line:
                log.warning("%s", line)
        return out

    def state(self) -> dict:
        """The tally as plain values (a checkpoint's `failures`)."""
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict | None) -> FailureTally:
        """The tally a checkpoint saved (`state`); None (an older checkpoint): an empty
        tally whose rows trained are unknown, so no `no_rows` verdict is made up."""
        return cls(**state) if state else cls(rows_trained=None)
