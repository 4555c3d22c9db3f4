"""How far a policy that sees only BabyAI's current view can go: a reactive rule.

The BabyAI runs in docs/BENCHMARKS.md ("The BabyAI sweep") train agents that see the
current 7x7 window only (`agent.memory_k=0`). This bench asks what that view allows,
without a model: a hand-written rule reads the text view (`envpkgs/babyai`'s
`describe`), finds the mission's object in the list of what it sees and walks to it
(forward while the object is ahead and the cell in front is free, else turn toward its
side); when the object is out of sight or the way is blocked it turns or moves at
random. With probability `epsilon` it acts at random anyway, which breaks the loops a
memoryless rule falls into (walking back and forth in front of an obstacle).

It runs the package env in its own venv (`arborl env add envpkgs/babyai` and
`arborl env setup babyai/GoToLocal-v0` first) on the held-out tasks `arborl train`
evaluates on (`eval.seed` 12345, the test split), so its rows read beside the training
runs' held-out success, with the random and oracle baselines on the same tasks.

    python bench/babyai_reactive.py                      # 200 tasks, epsilon 0 / 0.1 / 0.3
    python bench/babyai_reactive.py --episodes 50 --epsilon 0.1
    python bench/babyai_reactive.py --demos 200 --epsilon 0.3 --demos-out reactive.jsonl

`--demos N` instead writes the won episodes of N train-split tasks played by the rule (at
the first `--epsilon`) as a demo file for `arborl sft sft.demos=PATH`: a teacher that
sees only what the agent sees, where the BabyAI bot's demos act on what it remembers.
"""

from __future__ import annotations

import argparse
import random
import re
from collections.abc import Sequence
from typing import Any

MISSION = re.compile(r"Mission: go to (?:a|the) (\w+) (\w+)")
SEEN = re.compile(
    r"an? (?:(?:open|closed|locked) )?(\w+) (\w+) ((?:\d+ steps? forward)?(?: and )?(?:\d+ steps? to the (?:left|right))?)[;.]"
)
FORWARD = re.compile(r"(\d+) steps? forward")
SIDE = re.compile(r"(\d+) steps? to the (left|right)")
EXPLORE = ("turn left", "turn right", "move forward", "move forward")


def targets(observation: str) -> list[tuple[int, int]]:
    """(steps forward, steps right; left is negative) of each seen object the mission
    names, from the text view (a door by its colour, whatever its state); empty when none
    is in sight."""
    m = MISSION.search(observation)
    if m is None:
        raise ValueError(f"not a GoTo observation (no 'Mission: go to ...'): {observation[:80]!r}")
    found = []
    for color, kind, offset in SEEN.findall(observation):
        if (color, kind) != m.groups():
            continue
        f, s = FORWARD.search(offset), SIDE.search(offset)
        side = int(s.group(1)) * (1 if s.group(2) == "right" else -1) if s else 0
        found.append((int(f.group(1)) if f else 0, side))
    return found


def blocked(observation: str) -> bool:
    """Whether the cell in front holds a wall or an object (the view names it)."""
    return "right in front of you" in observation.lower()


def reactive_action(observation: str, rng: random.Random, epsilon: float) -> str:
    """The rule's action in one observation (see the module docstring)."""
    found = targets(observation)
    stuck = blocked(observation)
    if not found or rng.random() < epsilon:
        return rng.choice(EXPLORE[:2] if stuck else EXPLORE)
    ahead, side = min(found, key=lambda t: t[0] + abs(t[1]))
    if ahead > 0 and not stuck:
        return "move forward"
    if side:
        return "turn right" if side > 0 else "turn left"
    return rng.choice(EXPLORE[:2])


class ReactivePolicy:
    """`reactive_action` behind arborl's policy protocol (no model)."""

    def __init__(self, epsilon: float, seed: int = 0) -> None:
        self.name = f"reactive eps={epsilon:g}"
        self.epsilon, self.rng = epsilon, random.Random(seed)

    def act(self, episodes: Sequence[Any], envs: Sequence[Any]) -> list[Any]:
        from arborl.rollout.policies import Decision

        out = []
        for ep in episodes:
            a = reactive_action(ep.observation, self.rng, self.epsilon)
            out.append(Decision(action=a, response_text=a))
        return out


def write_demos(env: str, n: int, epsilon: float, seed: int, out: str, cfg: Any) -> int:
    """Play `n` train-split tasks of `env` with the rule and write the won ones to `out`."""
    from arborl.data.trajectory import write_trajectories
    from arborl.rollout import collect_episodes

    result = collect_episodes(ReactivePolicy(epsilon, seed=seed), env, n, cfg, split="train",
                              seed=seed, pool_mode="subprocess")  # fmt: skip
    won = [t for t in result.trajectories if t.won]
    path = write_trajectories(out, won)
    print(f"reactive eps={epsilon:g}: won {len(won)} of {n} train tasks; wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--env", default="babyai/GoToLocal-v0", help="a BabyAI GoTo level (default GoToLocal)"
    )
    p.add_argument("--episodes", type=int, default=200, help="held-out tasks (default 200)")
    p.add_argument("--epsilon", type=float, nargs="+", default=[0.0, 0.1, 0.3],
                   help="random-action rates, one row each (default 0 0.1 0.3)")  # fmt: skip
    p.add_argument(
        "--seed", type=int, default=12345, help="task draw (default: arborl train's eval.seed)"
    )
    p.add_argument(
        "--out", default=None, help="JSON path (default bench/results/babyai_reactive.json)"
    )
    p.add_argument(
        "--demos",
        type=int,
        default=0,
        metavar="N",
        help="write the rule's won episodes of N train tasks as SFT demos instead",
    )
    p.add_argument("--demos-out", default="reactive_demos.jsonl", help="the demo file (--demos)")
    args = p.parse_args(argv)
    if any(not 0.0 <= e <= 1.0 for e in args.epsilon):
        p.error(f"--epsilon must lie in [0, 1], got {args.epsilon}")
    if args.demos < 0:
        p.error(f"--demos must be 0 or more, got {args.demos}")

    from common import format_table, machine_info, write_json

    from arborl.rollout import RolloutConfig, collect_episodes, make_policy

    cfg = RolloutConfig(group_size=1, max_turns=64)
    if args.demos:
        return write_demos(args.env, args.demos, args.epsilon[0], args.seed, args.demos_out, cfg)
    policies = [ReactivePolicy(e, seed=args.seed) for e in args.epsilon]
    policies += [make_policy(name, cfg, seed=args.seed) for name in ("random", "oracle")]
    rows = []
    for policy in policies:
        result = collect_episodes(policy, args.env, args.episodes, cfg, split="test",
                                  seed=args.seed, pool_mode="subprocess")  # fmt: skip
        s = result.stats
        rows.append({
            "policy": policy.name, "success": s["success"], "success_lo": s["success_lo"],
            "success_hi": s["success_hi"], "mean_turns": s["mean_turns"], "episodes": s["episodes"],
        })  # fmt: skip
    print(f"{args.env}, {args.episodes} held-out tasks (test split, seed {args.seed}), 64 turns")
    print(format_table(
        ["policy", "success", "95% CI", "turns"],
        [[r["policy"], f"{r['success']:.3f}", f"[{r['success_lo']:.3f}, {r['success_hi']:.3f}]",
          f"{r['mean_turns']:.1f}"] for r in rows],
    ))  # fmt: skip
    doc = {"env": args.env, "seed": args.seed, "rows": rows, "machine": machine_info(1)}
    print(f"wrote {write_json(doc, args.out, 'babyai_reactive')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
