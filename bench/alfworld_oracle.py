"""The walkthrough oracle (or uniform random admissible actions) over every game of an
ALFWorld split, each game once, in order.

`arborl eval` draws tasks by seed, with replacement; this sweep plays each game of the
split exactly once, in-process inside the package's venv, and prints one line per game
and a DONE line with the success rate. `--policy random` picks uniformly among the
admissible commands (game i's stream is `random.Random(seed * 100003 + i)`, so shards
play the same moves as one run); `--shard K/N` plays games K, K+N, ... (run N shards in
parallel and add their DONE lines); `--reverse` plays the shard's games from the last (a
second process per shard, started later, meets the first in the middle: merge their
lines by game, each game's moves are the same whoever plays it). Run it with the package's interpreter:

    ARBORL_ALFWORLD_ARCHIVES=../shared/data/alfworld PYTHONPATH=. \\
        <ARBORL_HOME>/envs/alfworld-<hash>/bin/python bench/alfworld_oracle.py valid_unseen \\
        [--policy random] [--shard 0/2]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "envpkgs" / "alfworld"))

import alfworld_data as data  # noqa: E402 - the package folder is put on the path above
import alfworld_env  # noqa: E402


def main(split: str, policy: str, seed: int, shard: int, shards: int, reverse: bool) -> None:
    env = alfworld_env.ALFWorldEnv(split=split)
    wins = n = steps = 0
    t0 = time.time()
    games = list(enumerate(data.game_files(split)))
    for i, game in reversed(games) if reverse else games:
        if i % shards != shard:
            continue
        rng = random.Random(seed * 100003 + i)
        _, info = env.reset(options={"task": {"game": game}})
        done = False
        while not done:
            if policy == "oracle":
                action = env.oracle_action()
            else:
                action = rng.choice(info["available_actions"])
            _, _, term, trunc, info = env.step(action)
            steps, done = steps + 1, term or trunc
        wins, n = wins + info["won"], n + 1
        print(f"{n} {wins} {info['won']} {env.turn} {time.time() - t0:.0f}s {game}", flush=True)
    print(f"DONE split={split} policy={policy} shard={shard}/{shards} games={n} won={wins} "
          f"rate={wins / n:.4f} steps={steps} wall_s={time.time() - t0:.0f}")  # fmt: skip


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("split", nargs="?", default="valid_unseen")
    p.add_argument("--policy", choices=("oracle", "random"), default="oracle")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard", default="0/1", help="K/N: play games K, K+N, ...")
    p.add_argument("--reverse", action="store_true", help="play the shard's games last first")
    a = p.parse_args()
    k, n = (int(x) for x in a.shard.split("/"))
    main(a.split, a.policy, a.seed, k, n, a.reverse)
