"""Rebuild `arborl/models/assets/env_bpe.json`, the `env-bpe` tokenizer of the `envbpe-*`
presets: a byte-level BPE trained on the text the real-benchmark packages show an agent.

    ARBORL_HOME=... python tools/build_env_bpe.py --corpus /tmp/env_text.txt
    python tools/build_env_bpe.py --corpus /tmp/env_text.txt --train-only

The corpus is every instruction, observation (in each view an env offers) and available
action of episodes played by the oracle with random mistakes (epsilon 0.3, seeded), on
BabyAI levels, every TextWorld-Express family and ALFWorld (the packages must be set up:
`arborl env setup ID`; `--skip-alfworld` without its game files), plus arborl's own prompt
words. Collection and training are seeded, so the same packages give the same corpus and
the same merges; the JSON is committed, so runs never need the packages to tokenize.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

from arborl.models.env_bpe import ASSET, train_env_bpe
from arborl.rollout import RolloutConfig, run_episodes_with_policy
from arborl.rollout.policies import Decision

BABYAI = ("GoToLocal-v0", "PickupLoc-v0", "OpenDoor-v0", "PutNextLocal-v0", "GoTo-v0",
          "Synth-v0", "UnlockPickup-v0", "KeyCorridorS3R2-v0")  # fmt: skip
TWX = ("CoinCollector", "CookingWorld", "TWC", "MapReader", "Arithmetic", "Sorting",
       "SimonSays", "PeckingOrder")  # fmt: skip
ARBORL_WORDS = [
    "<think>", "</think>", "<action>", "</action>", "Invalid action.", "Respond with",
    "Your action:", "one of:", "Think step by step, then give your action.",
]  # fmt: skip


class NoisyOracle:
    """The env's oracle, replaced with probability `epsilon` by a random available action."""

    name = "noisy-oracle"

    def __init__(self, epsilon: float, seed: int) -> None:
        self.epsilon, self.rng = epsilon, random.Random(seed)

    def act(self, episodes, envs):
        out = []
        for ep, env in zip(episodes, envs):
            actions = ep.info.get("available_actions") or []
            if actions and self.rng.random() < self.epsilon:
                a = self.rng.choice(sorted(actions))
            else:
                a = env.oracle_action()
            out.append(Decision(action=a, response_text=a))
        return out


def episode_text(env_id: str, num_episodes: int, max_turns: int, seed: int, **kwargs) -> list[str]:
    """The lines an agent reads in `num_episodes` noisy-oracle episodes of `env_id`."""
    from arborl.envs.poolset import PoolSet

    cfg = RolloutConfig(num_tasks=num_episodes, max_turns=max_turns, seed=seed)
    seeds = list(range(seed, seed + num_episodes))
    with PoolSet(env_id, mode="subprocess", num_workers=2, timeout_s=120) as pools:
        res = run_episodes_with_policy(NoisyOracle(0.3, seed), pools, seeds, cfg,
                                       split="train", env_kwargs=kwargs)  # fmt: skip
    lines = []
    for t in res.trajectories:
        lines.append(t.instruction)
        for s in t.steps:
            lines += [s.observation, s.action, " ".join(s.info.get("available_actions") or [])]
    return lines


def collect(path: Path, alfworld: bool) -> None:
    lines = list(ARBORL_WORDS)
    for level in BABYAI:
        for view in ("text", "compact"):
            lines += episode_text(f"babyai/{level}", 24, 40, 1, view=view)
        print(f"babyai/{level}: {len(lines)} lines", flush=True)
    for family in TWX:
        lines += episode_text(f"twx/{family}-v0", 12, 30, 1)
        print(f"twx/{family}: {len(lines)} lines", flush=True)
    if alfworld:
        lines += episode_text("alfworld/ALFWorld-v0", 8, 30, 1)
        print(f"alfworld: {len(lines)} lines", flush=True)
    path.write_text("\n".join(x for x in lines if x) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="corpus text file (written unless --train-only)")
    p.add_argument("--train-only", action="store_true", help="train on an existing corpus")
    p.add_argument("--skip-alfworld", action="store_true", help="leave ALFWorld's text out")
    p.add_argument("--vocab-size", type=int, default=2048,
                   help="most tokens, specials included (training stops earlier when no pair "
                   "is left to merge)")  # fmt: skip
    p.add_argument("--out", default=str(ASSET), help="where the tokenizer JSON goes")
    args = p.parse_args()
    corpus = Path(args.corpus)
    if not args.train_only:
        collect(corpus, alfworld=not args.skip_alfworld)
    text = corpus.read_text()
    core = train_env_bpe(text.splitlines(), args.vocab_size)
    Path(args.out).write_text(json.dumps(json.loads(core.to_str()), indent=None) + "\n")
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    print(f"wrote {args.out}: {core.get_vocab_size()} tokens, corpus {len(text):,} chars "
          f"sha256 {digest}")  # fmt: skip


if __name__ == "__main__":
    main()
