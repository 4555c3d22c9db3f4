"""Every BabyAI level of minigrid: the manifest entries and the bot oracle's sweep.

Run with the package's interpreter, in this folder:

    <ARBORL_HOME>/envs/babyai-<hash>/bin/python babyai_levels.py manifest > entries.toml
    <ARBORL_HOME>/envs/babyai-<hash>/bin/python babyai_levels.py oracle --seeds 30

`manifest` prints one `[[envs]]` entry per level of `babyai_env.LEVELS`: id
`babyai/<Name>-vN`, the generic `BabyAIEnv` with the level in its kwargs, and `max_turns`
= minigrid's own step limit for the level (the largest over `--seeds` test-split resets:
RoomGrid levels size it from the instruction, so it varies by seed). The first four ids
keep the limits they shipped with. `oracle` plays the BabyAI bot on `--seeds` test-split
tasks per level under that limit and prints one line per level and a JSON summary.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import time

import gymnasium as gym
from babyai_env import LEVELS, SEED_RANGES, BabyAIEnv, level_name

SHIPPED = {
    "BabyAI-GoToLocal-v0": (64, "go to an object in one room, with distractors"),
    "BabyAI-PickupLoc-v0": (64, "pick up an object described by its location"),
    "BabyAI-OpenDoor-v0": (64, "open the door named by colour or location"),
    "BabyAI-PutNextLocal-v0": (128, "put an object next to another"),
}
"""The turn limits and descriptions of the first four ids, unchanged so existing runs stay
comparable."""


def limit_seeds(n: int) -> list[int]:
    rng = random.Random(0)
    lo, hi = SEED_RANGES["test"]
    return [rng.randrange(lo, hi) for _ in range(n)]


def level_limit(level: str, seeds: list[int]) -> int:
    """minigrid's step limit for `level`: the largest `max_steps` over resets at `seeds`."""
    if level in SHIPPED:
        return SHIPPED[level][0]
    world = gym.make(level).unwrapped
    most = 0
    for s in seeds:
        with contextlib.redirect_stdout(io.StringIO()):
            world.reset(seed=s)
        most = max(most, int(world.max_steps))
    return most


def manifest(seeds: int) -> None:
    for level in LEVELS:
        name = level_name(level)
        print(f'\n[[envs]]\nid = "babyai/{name}"\nentry_point = "babyai_env:BabyAIEnv"')
        print(f'kwargs = {{ level = "{level}" }}')
        print(f"max_turns = {level_limit(level, limit_seeds(seeds))}")
        short = name.split("-")[0]
        what = f": {SHIPPED[level][1]}" if level in SHIPPED else f" (minigrid {level})"
        print(f'description = "BabyAI {short}{what}"')


def oracle(seeds: int, levels: list[str]) -> None:
    rows = {}
    for level in levels or LEVELS:
        limit = level_limit(level, limit_seeds(20))
        env = BabyAIEnv(split="test", max_turns=limit, level=level)
        wins = turns = 0
        t0 = time.time()
        for s in range(seeds):
            env.reset(seed=s)
            done, info = False, {}
            while not done:
                _, _, term, trunc, info = env.step(env.oracle_action())
                done, turns = term or trunc, turns + 1
            wins += info["won"]
        rows[level_name(level)] = {"won": wins, "n": seeds, "turns": turns / seeds,
                                   "max_turns": limit, "wall_s": round(time.time() - t0, 1)}  # fmt: skip
        r = rows[level_name(level)]
        print(f"{level_name(level)} {wins}/{seeds} turns={r['turns']:.1f} max={limit} "
              f"{r['wall_s']}s", flush=True)  # fmt: skip
    print(json.dumps(rows))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("manifest", "oracle"))
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--levels", nargs="*", default=[], help="minigrid ids (default: all)")
    a = p.parse_args()
    manifest(a.seeds) if a.command == "manifest" else oracle(a.seeds, a.levels)
