"""The walkthrough oracle over every game of an ALFWorld split (each game once, in order).

`arborl eval` draws tasks by seed, with replacement; this sweep plays each game of the
split exactly once, in-process inside the package's venv, and prints one line per game
and a DONE line with the success rate. Run it with the package's interpreter:

    ARBORL_ALFWORLD_ARCHIVES=../shared/data/alfworld PYTHONPATH=. \\
        <ARBORL_HOME>/envs/alfworld-<hash>/bin/python bench/alfworld_oracle.py valid_unseen
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "envpkgs" / "alfworld"))

import alfworld_data as data  # noqa: E402 - the package folder is put on the path above
import alfworld_env  # noqa: E402


def main(split: str) -> None:
    env = alfworld_env.ALFWorldEnv(split=split)
    wins = n = steps = 0
    t0 = time.time()
    for game in data.game_files(split):
        env.reset(options={"task": {"game": game}})
        done, info = False, {}
        while not done:
            _, _, term, trunc, info = env.step(env.oracle_action())
            steps, done = steps + 1, term or trunc
        wins, n = wins + info["won"], n + 1
        print(f"{n} {wins} {info['won']} {env.turn} {time.time() - t0:.0f}s {game}", flush=True)
    print(f"DONE split={split} games={n} won={wins} rate={wins / n:.4f} steps={steps} "
          f"wall_s={time.time() - t0:.0f}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "valid_unseen")
