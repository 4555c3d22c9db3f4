"""The conformance checker every env must pass (`check_env`), in the spirit of Gymnasium's.

It runs the env through what rollouts and search rely on and collects *every* failure
instead of stopping at the first, so one run tells an env author all that is wrong:
return types, info keys and types, seed determinism, garbage actions (never raise, always
invalid), snapshot/restore round trips and independence, truncation at exactly
`max_turns`, explicit tasks through `reset(options={"task": ...})` and idempotent `close()`.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Hashable
from typing import Any

from arborl.envs.registry import make

GARBAGE_ACTIONS: tuple[str, ...] = (
    "",
    " ",
    "\n\t",
    "\x00\x01\x02",
    "🙂🚀 ünïcödé ☃",
    "<<<garbage>>> {{ }} ;;",
    "?" * 300,
    "zq" * 5_000,  # 10k characters
)
"""Actions no env should accept; `check_env` adds random strings drawn from a seed."""


class EnvCheckError(AssertionError):
    """An env failed conformance; `failures` lists every problem found."""

    def __init__(self, env_name: str, failures: list[str]) -> None:
        self.failures = failures
        lines = "\n".join(f"  - {f}" for f in failures)
        super().__init__(f"env {env_name} failed {len(failures)} conformance check(s):\n{lines}")


def _random_garbage(rng: random.Random, num: int) -> list[str]:
    alphabet = "~!@#$%^&()[]{}<>|\\;:'\",`" + "éßж漢字🙂\u200b\x7f"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(num)]


class _Checker:
    def __init__(self, env: Any, num_seeds: int, seed: int) -> None:
        self.env = env
        self.seeds = [seed + i for i in range(num_seeds)]
        self.rng = random.Random(seed)
        self.failures: list[str] = []

    def fail(self, msg: str) -> None:
        if msg not in self.failures:
            self.failures.append(msg)

    # --- type checks ----------------------------------------------------------------------
    def check_info(self, info: Any, where: str) -> None:
        if not isinstance(info, dict):
            self.fail(f"{where}: info is {type(info).__name__}, expected dict")
            return
        for key, typ in (("won", bool), ("valid_action", bool), ("task_id", str)):
            if key not in info:
                self.fail(f"{where}: info lacks key {key!r}")
            elif not isinstance(info[key], typ):
                self.fail(
                    f"{where}: info[{key!r}] is {type(info[key]).__name__}, expected {typ.__name__}"
                )
        if "anchor" not in info:
            self.fail(f"{where}: info lacks key 'anchor'")
        elif not isinstance(info["anchor"], Hashable):
            self.fail(
                f"{where}: info['anchor'] of type {type(info['anchor']).__name__} is not hashable"
            )
        else:
            try:
                hash(info["anchor"])
            except TypeError as e:
                self.fail(f"{where}: hash(info['anchor']) raised {e!r}")
        acts = info.get("available_actions")
        if acts is not None and not (
            isinstance(acts, list) and all(isinstance(a, str) for a in acts)
        ):
            self.fail(f"{where}: info['available_actions'] must be list[str], got {acts!r:.80}")

    def reset(self, seed: int | None, options: dict | None = None, where: str = "reset") -> tuple:
        out = self.env.reset(seed=seed, options=options)
        if not (isinstance(out, tuple) and len(out) == 2):
            self.fail(f"{where}: reset() returned {type(out).__name__}, expected (obs, info)")
            return "", {}
        obs, info = out
        if not isinstance(obs, str):
            self.fail(f"{where}: observation is {type(obs).__name__}, expected str")
        self.check_info(info, where)
        if isinstance(info, dict) and info.get("valid_action") is not True:
            self.fail(f"{where}: info['valid_action'] must be True after reset")
        if not isinstance(getattr(self.env, "instruction", None), str):
            self.fail(f"{where}: env.instruction must be a str after reset")
        return obs, info

    def step(self, action: str, where: str) -> tuple:
        try:
            out = self.env.step(action)
        except Exception as e:
            self.fail(f"{where}: step({action!r:.40}) raised {e!r:.200}")
            return "", 0.0, True, False, {}
        if not (isinstance(out, tuple) and len(out) == 5):
            self.fail(f"{where}: step() returned {type(out).__name__}, expected a 5-tuple")
            return "", 0.0, True, False, {}
        obs, reward, terminated, truncated, info = out
        if not isinstance(obs, str):
            self.fail(f"{where}: step observation is {type(obs).__name__}, expected str")
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            self.fail(f"{where}: reward is {type(reward).__name__}, expected float")
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, bool):
                self.fail(f"{where}: {name} is {type(flag).__name__}, expected bool")
        self.check_info(info, where)
        return out

    # --- behaviour checks -----------------------------------------------------------------
    def policy_action(self, info: dict) -> str:
        """A plausible action: a legal one where listed, else the oracle's, else garbage."""
        acts = info.get("available_actions") if isinstance(info, dict) else None
        if acts:
            return self.rng.choice(acts)
        oracle = getattr(self.env, "oracle_action", None)
        if oracle is not None and self.rng.random() < 0.7:
            try:
                return oracle()
            except NotImplementedError:
                pass
        return self.rng.choice(GARBAGE_ACTIONS[:6])

    def check_determinism(self, s: int) -> None:
        obs1, info1 = self.reset(s, where=f"reset(seed={s})")
        instr1 = getattr(self.env, "instruction", None)
        obs2, info2 = self.reset(s, where=f"reset(seed={s}) again")
        if obs1 != obs2 or instr1 != getattr(self.env, "instruction", None):
            self.fail(f"reset(seed={s}) twice gave different observations or instructions")
        if info1.get("task_id") != info2.get("task_id"):
            self.fail(
                f"reset(seed={s}) twice gave task_ids {info1.get('task_id')!r}, {info2.get('task_id')!r}"
            )

    def check_garbage(self, s: int) -> None:
        # One episode takes the garbage in turn (an invalid action leaves the state as it
        # was); a new one starts only when an action ends it: a real benchmark's reset can
        # cost seconds, and a reset per action made this most of the checker's time.
        ended = True
        for action in GARBAGE_ACTIONS + tuple(_random_garbage(self.rng, 8)):
            if ended:
                self.reset(s, where=f"reset(seed={s})")
            _, _, term, trunc, info = self.step(action, where=f"seed {s} garbage {action!r:.30}")
            ended = term is not False or trunc is not False
            if isinstance(info, dict) and info.get("valid_action") is not False:
                self.fail(
                    f"seed {s}: garbage action {action!r:.30} gave valid_action={info.get('valid_action')!r}"
                )

    def rollout(self, actions: list[str], where: str) -> list[tuple]:
        record = []
        for a in actions:
            obs, reward, term, trunc, info = self.step(a, where)
            anchor = info.get("anchor") if isinstance(info, dict) else None
            record.append(
                (
                    obs,
                    reward,
                    term,
                    trunc,
                    info.get("won") if isinstance(info, dict) else None,
                    anchor,
                )
            )
            if term or trunc:
                break
        return record

    def check_snapshot(self, s: int) -> None:
        _, info = self.reset(s, where=f"reset(seed={s})")
        for _ in range(2):  # move away from the start state first
            _, _, term, trunc, info = self.step(self.policy_action(info), f"seed {s} warm-up")
            if term or trunc:
                _, info = self.reset(s, where=f"reset(seed={s})")
                break
        snap = self.env.snapshot()
        spare = copy.deepcopy(snap)
        actions = [self.policy_action(info) for _ in range(6)]
        first = self.rollout(actions, f"seed {s} after snapshot")
        self.rollout(actions[::-1] + ["", "?"], f"seed {s} mutating")
        self.env.restore(snap)
        again = self.rollout(actions, f"seed {s} after restore")
        self.env.restore(spare)
        third = self.rollout(actions, f"seed {s} after restore of copy")
        if first != again:
            self.fail(
                f"seed {s}: restore(snapshot) then the same actions {actions} gave different results"
            )
        if first != third:
            self.fail(f"seed {s}: a snapshot changed after later steps (restore of a copy differs)")

    def check_truncation(self, s: int) -> None:
        max_turns = getattr(self.env, "max_turns", None)
        if max_turns is None:
            return  # no turn limit of its own: `register(..., max_turns=N)` adds one in `make`
        if not isinstance(max_turns, int) or max_turns < 1:
            self.fail(f"env.max_turns must be a positive int or absent, got {max_turns!r}")
            return
        self.reset(s, where=f"reset(seed={s})")
        for turn in range(1, max_turns + 1):
            _, _, term, trunc, _ = self.step("<<<garbage>>>", f"seed {s} turn {turn}")
            if term:
                return  # an env may end episodes on invalid actions; nothing to truncate
            if trunc != (turn == max_turns):
                self.fail(f"seed {s}: truncated={trunc} at turn {turn} of max_turns={max_turns}")
                return

    def check_explicit_task(self, s: int) -> None:
        obs, info = self.reset(s, where=f"reset(seed={s})")
        task = getattr(self.env, "task", None)
        if task is None:
            return  # not a TextEnv-style env: no task attribute to replay
        obs2, info2 = self.reset(None, options={"task": copy.deepcopy(task)}, where="reset(task)")
        if info2.get("task_id") != info.get("task_id") or obs2 != obs:
            self.fail(f"seed {s}: reset(options={{'task': env.task}}) did not reproduce the task")

    def run(self) -> list[str]:
        for s in self.seeds:
            for check in (self.check_determinism, self.check_garbage, self.check_snapshot,
                          self.check_truncation, self.check_explicit_task):  # fmt: skip
                try:
                    check(s)
                except Exception as e:
                    self.fail(f"seed {s}: {check.__name__} raised {e!r:.300}")
        try:
            self.env.close()
            self.env.close()
        except Exception as e:
            self.fail(f"close() twice raised {e!r}")
        return self.failures


def check_env(
    env_or_id: Any, num_seeds: int = 3, seed: int = 0, raise_errors: bool = True
) -> list[str]:
    """Check an env (an instance, or an id to `make`) for conformance; close it at the end.

    Returns the list of failures (empty when conformant); with `raise_errors=True` (the
    default) a non-empty list raises `EnvCheckError` instead.
    """
    name = repr(env_or_id) if isinstance(env_or_id, str) else type(env_or_id).__name__
    env = make(env_or_id) if isinstance(env_or_id, str) else env_or_id
    failures = _Checker(env, num_seeds, seed).run()
    if failures and raise_errors:
        raise EnvCheckError(name, failures)
    return failures
