"""How the report and the console word a run's failures (`summary.json["failures"]`,
written by `arborl.train.failures.FailureTally`): "N of M episodes errored (...; first
error: ...)" and, for a run that learned nothing, why and what to change. Here, below
`arborl.train`, so the report reads the same words the trainer logs."""

from __future__ import annotations

PHASES = {"before": "before RL", "rl": "RL", "eval": "during RL", "after": "after RL"}
"""Phase key -> its name in messages, in run order."""


def errored_line(failures: dict) -> str:
    """ "N of M episodes errored (before RL 4 of 4, RL 8 of 8, after RL 4 of 4; first
    error: ...)", or "" when none did."""
    errored, episodes = failures.get("total_errored", 0), failures.get("total_episodes", 0)
    if not errored:
        return ""
    parts = [
        f"{PHASES.get(p, p)} {failures['errored'].get(p, 0)} of {n}"
        for p, n in failures.get("episodes", {}).items()
        if n
    ]
    return (
        f"{errored} of {episodes} episodes errored ({', '.join(parts)}; first error: "
        f"{failures.get('first_error', '')})"
    )


def verdict_line(failures: dict) -> str:
    """The message of a run that learned nothing (what happened, then what to change),
    or ""."""
    verdict = failures.get("verdict", "")
    if not verdict:
        return ""
    what = {
        "all_errored": "every episode of the run errored, so its success numbers measure nothing",
        "no_rows": f"the run trained on 0 rows over its RL steps ({failures.get('total_errored', 0)}"
        " episodes errored)",
    }[verdict]
    return f"nothing was learned: {what}. What to change: {failures.get('hint', '')}"
