"""Oracle demos, optionally with recoverable mistakes (`arborl env demos --epsilon`).

An SFT warm start on the oracle's own episodes only ever shows the states on the oracle's
path, so after one wrong move the policy stands where no demo went, and a small model
then tends to emit junk until the turn limit. With `epsilon > 0`, each turn takes, with
that probability, a uniformly drawn legal action other than the oracle's (from
`info["available_actions"]`), then the oracle carries on from wherever that led: the
demos show recoveries. Only the oracle's turns are training targets: the trajectory's
`meta["turn_loss"]` is False on each mistake (the convention `arborl curate` reads for
chat data, and that `arborl.train.sft.build_sft_examples` honours), so the mistakes stay
in the prompts' history but are never imitated.
"""

from __future__ import annotations

import json
import random
from typing import Any

from arborl.data.trajectory import Step, Trajectory


def _json_safe(info: dict[str, Any]) -> dict[str, Any]:
    """Info as JSON values (anchors are tuples: they become lists)."""
    return json.loads(json.dumps(info, default=repr))


def oracle_demo(
    env: Any,
    env_id: str,
    seed: int,
    split: str = "train",
    epsilon: float = 0.0,
    rng: random.Random | None = None,
) -> Trajectory:
    """One episode of `env` (reset with `seed` on `split`) played by its oracle, each turn
    replaced with probability `epsilon` by a random other legal action drawn from `rng`."""
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon={epsilon!r} must be in [0, 1]")
    if epsilon > 0 and rng is None:
        raise ValueError("epsilon > 0 needs an rng (a seeded random.Random)")
    obs, info = env.reset(seed=seed, options={"split": split})
    meta: dict[str, Any] = {"policy": "oracle", "split": split}
    traj = Trajectory(info["task_id"], env_id, seed, instruction=env.instruction, meta=meta)
    trained: list[bool] = []
    done = False
    while not done:
        action = env.oracle_action()
        if epsilon > 0 and rng.random() < epsilon:
            others = [a for a in info.get("available_actions") or [] if a != action]
            if "available_actions" not in info:
                raise ValueError(
                    f"env {env_id!r} lists no info['available_actions'], so a mistake cannot "
                    "be drawn; demos with mistakes need an env with a finite action set "
                    "(epsilon=0 records the oracle alone)"
                )
            action = rng.choice(others) if others else action
            trained.append(not others)  # no other legal action: the oracle's, trained on
        else:
            trained.append(True)
        next_obs, reward, terminated, truncated, info = env.step(action)
        traj.steps.append(Step(obs, action, float(reward), terminated, truncated, _json_safe(info)))
        obs, done = next_obs, terminated or truncated
    traj.won = bool(info["won"])
    if epsilon > 0:
        meta.update(epsilon=epsilon, turn_loss=trained)
    return traj
