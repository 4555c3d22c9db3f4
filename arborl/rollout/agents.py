"""Agents as environments: run a program you wrote once per episode against the gateway,
and turn its recorded calls into training rows.

    result = run_agent_rollout(backend, tokenizer, pool, seeds, rollout_cfg, program_cfg,
                               split="train", env_id="arborl/ToolQA-v0")
    result.batch      # step view: one row per model call, token-exact

Each episode: the env pool draws the task (`pool.reset(seeds, group_size)`, so a GRPO group
is `group_size` runs of one task), a gateway session opens (its own URL and key), the
program runs (`AgentProgram`: a plain or `async` function, or a command line) with at most
`max_concurrent` episodes at once, the session closes and its calls are the episode's
turns. The reward is the program's (a number), the env's grade of its answer (a str goes to
`env.step`), or `agent_program.reward(task, result, calls)`'s.

A row is one sampled choice of one call: the prompt ids the policy saw and the ids, logprobs
and finish reason it sampled, exactly as recorded; the episode's reward sits on its last row
(like an env's final step). So what is trained is what was sampled, whatever the program
did with the text between calls (edited the history, dropped turns: docs/agents.md).

A program that raises, runs past `timeout_s`, or gives no reward ends only its own episode:
it is marked `truncation_reason="env_error"`, counted (`agent_errors`, and by the trainer in
`rollout/env_errors` against `env.max_env_errors`), and left out of the update.
"""

from __future__ import annotations

import contextlib
import json
import logging
import numbers
import os
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from arborl.data.reward_check import BadReward, check_reward
from arborl.generation.base import row_seed
from arborl.generation.calls import CallRecord
from arborl.generation.gateway import Gateway, GatewayLimits, SamplingOverride
from arborl.registry import load_entry_point
from arborl.rollout.agent_config import AgentProgramConfig
from arborl.rollout.agent_run import AgentFailed, crash, run_command, run_fn
from arborl.rollout.batching import build_batch
from arborl.rollout.config import RolloutConfig
from arborl.rollout.episode import EpisodeState, TurnRecord, to_trajectory
from arborl.rollout.loop import RolloutResult
from arborl.rollout.metrics import episode_stats

log = logging.getLogger("arborl")

GRACE_S = 5.0
"""Seconds a session outlives its episode's deadline, so a call that started in time ends."""


@dataclass
class AgentProgram:
    """The program run once per episode: `fn(task, base_url, api_key)` or a command line."""

    fn: Callable[..., Any] | None = None
    command: list[str] | None = None

    @classmethod
    def from_config(cls, cfg: AgentProgramConfig) -> AgentProgram:
        if cfg.fn and cfg.process:  # checked here, run in the child
            load_entry_point(cfg.fn, "agent_program.fn")
            return cls(command=[sys.executable, "-m", "arborl.rollout.fn_agent", cfg.fn])
        if cfg.fn:
            return cls(fn=load_entry_point(cfg.fn, "agent_program.fn"))
        if cfg.command:
            return cls(command=shlex.split(cfg.command))
        raise ValueError(
            "rollout.mode=program needs a program: set agent_program.fn=package.module:function "
            "or agent_program.command='python my_agent.py' (docs/agents.md)"
        )

    def __call__(self, task: dict, base_url: str, api_key: str, timeout_s: float) -> Any:
        """Run once; raise `AgentFailed` if it crashes or runs past `timeout_s` (where each
        kind runs and what its deadline guarantees: `arborl.rollout.agent_run`)."""
        if self.command is not None:
            env = {**os.environ, "ARBORL_TASK": json.dumps(task), "OPENAI_BASE_URL": base_url,
                   "OPENAI_API_KEY": api_key}  # fmt: skip
            return run_command(self.command, env, timeout_s)
        return run_fn(self.fn, (task, base_url, api_key), timeout_s)


@dataclass
class Outcome:
    """How one episode ended."""

    result: Any = None
    """What the program returned."""
    calls: list[CallRecord] | None = None
    """The gateway's records of its calls, ordered."""
    error: AgentFailed | None = None
    reward: float | None = None
    won: bool = False


def run_programs(
    program: AgentProgram,
    tasks: list[dict],
    gateway: Gateway,
    cfg: AgentProgramConfig,
    seeds: list[int | None],
    sampling: SamplingOverride | None = None,
) -> list[Outcome]:
    """Run `program` once per task, `cfg.max_concurrent` at a time, each in its own session
    (opened as it starts, closed as it ends, sampling with `sampling`); returns one
    `Outcome` per task."""
    slots = threading.Semaphore(cfg.max_concurrent)
    outcomes = [Outcome() for _ in tasks]

    def episode(i: int) -> None:
        with slots:
            s = gateway.open_session(meta={"episode": i, "task_id": tasks[i]["task_id"]},
                                     timeout_s=cfg.timeout_s + GRACE_S, seed=seeds[i],
                                     sampling=sampling)  # fmt: skip
            try:
                outcomes[i].result = program(tasks[i], s.base_url, s.key, cfg.timeout_s)
            except AgentFailed as e:
                outcomes[i].error = e
            except Exception as e:  # the runner itself (asyncio.run in a running loop...)
                outcomes[i].error = crash(e)
            finally:
                outcomes[i].calls = gateway.close_session(s.id)

    threads = [threading.Thread(target=episode, args=(i,), daemon=True) for i in range(len(tasks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real)


def _reward(outcome: Outcome, value: Any, what: str) -> None:
    """Set `outcome.reward` to `value` if it is a sound reward (`check_reward`), else
    make the episode a `no_reward` error naming why."""
    try:
        outcome.reward = check_reward(value, what)
    except BadReward as e:
        outcome.error = AgentFailed("no_reward", str(e))


def score(outcomes: list[Outcome], tasks: list[dict], pool: Any, cfg: AgentProgramConfig,
          reward_fn: Callable | None) -> None:  # fmt: skip
    """Fill each outcome's reward and won: `reward_fn`, else the program's number, else the
    env's grade of its answer (one `pool.step` for all answers); none of these, or a
    reward that is not a finite number within +-MAX_ABS_REWARD: no_reward."""
    answers: dict[int, str] = {}
    for i, o in enumerate(outcomes):
        if o.error is not None:
            continue
        r = o.result
        if reward_fn is not None:
            try:
                r = reward_fn(tasks[i], r, o.calls)
            except Exception as e:
                o.error = AgentFailed("no_reward", f"agent_program.reward raised {e!r}")
                continue
            _reward(o, r, "agent_program.reward returned")
            continue
        if isinstance(r, dict):
            r = r["reward"] if "reward" in r else r.get("answer")
        if _is_number(r):
            _reward(o, r, "the agent's reward")
        elif isinstance(r, str):
            answers[i] = r
        else:
            o.error = AgentFailed("no_reward", f"the agent returned {type(r).__name__}, not a "
                                  "reward, an answer or a dict with either; return one or "
                                  "set agent_program.reward")  # fmt: skip
    for o in outcomes:
        if o.error is None and o.reward is not None:
            o.won = o.reward >= cfg.win_reward
    if answers:
        results, _ = pool.step(answers)
        for i in answers:
            res = results[i]
            if res.info.get("env_error"):
                outcomes[i].error = AgentFailed(
                    "crashed", f"grading the answer: {res.info['env_error']}"
                )
                continue
            _reward(outcomes[i], res.reward, "the env's grade of the answer")
            outcomes[i].won = outcomes[i].error is None and bool(res.info.get("won"))


def _observation(call: CallRecord) -> str:
    """The text the policy answered in a call: the last non-assistant message, or the prompt."""
    req = call.request
    for m in reversed(req.get("messages") or []):
        if isinstance(m, dict) and m.get("role") != "assistant":
            c = m.get("content")
            return c if isinstance(c, str) else json.dumps(c)
    p = req.get("prompt")
    return p if isinstance(p, str) else json.dumps(p)


def episode_from_calls(i: int, task: dict, group_size: int, outcome: Outcome, run: str,
                       max_turns: int) -> EpisodeState:  # fmt: skip
    """The episode as the rollout loop would have recorded it: one turn per sampled choice."""
    g = i // group_size
    ep = EpisodeState(index=i, group_id=g, traj_id=f"{run}-{g}-{i % group_size}",
                      seed=int(task["seed"]), task_id=task["task_id"],
                      instruction=task.get("instruction", ""), observation=task["observation"],
                      info={"task_id": task["task_id"]}, max_turns=max_turns)  # fmt: skip
    for call in outcome.calls or []:
        for prompt_ids, ch in call.rows():
            ok = ch.tool_call_error is None
            info = {"valid_action": ok, "won": False, "task_id": task["task_id"],
                    "session": call.session, "call": call.call,
                    "weight_version": call.weight_version, "tool_calls": ch.tool_calls or [],
                    "messages": call.request.get("messages") or []}  # fmt: skip
            if not ok:
                info["tool_call_error"] = ch.tool_call_error
            ep.turns.append(TurnRecord(
                observation=_observation(call), action=ch.text, response_text=ch.text,
                format_ok=ok, anchor=None, info=info, prompt_ids=list(prompt_ids),
                response_ids=list(ch.response_ids), logprobs=list(ch.logprobs),
                finish_reason=ch.finish_reason,
            ))  # fmt: skip
            ep.generated_tokens += len(ch.response_ids)
    if outcome.error is not None:
        ep.end("env_error")
        if ep.turns:
            ep.turns[-1].info["env_error"] = (
                f"agent {outcome.error.reason}: {outcome.error.message}"
            )
    elif ep.turns:
        last = ep.turns[-1]
        last.reward, last.terminated = float(outcome.reward or 0.0), True
        last.info["won"] = outcome.won
        ep.done = True
    else:
        ep.done = True
        ep.info["won"] = outcome.won
    return ep


def agent_tasks(pool: Any, seeds: Sequence[int], group_size: int, split: str,
                env_id: str) -> list[dict]:  # fmt: skip
    """Reset `pool` (one seed per group) and describe each episode's task for its program."""
    obs, infos = pool.reset(list(seeds), group_size)
    tasks = []
    for i, (o, info) in enumerate(zip(obs, infos)):
        seed = int(seeds[i // group_size])
        env = pool[i]
        task = {"task_id": str(info.get("task_id", f"seed-{seed}")), "seed": seed,
                "env_id": env_id, "split": split, "observation": o,
                "instruction": getattr(env, "instruction", "") or "",
                "group_id": i // group_size, "episode": i}  # fmt: skip
        data = getattr(env, "task", None)
        if isinstance(data, dict):
            try:
                json.dumps(data)
                task["data"] = data
            except (TypeError, ValueError):
                pass
        tasks.append(task)
    return tasks


def start_gateway(backend: Any, tokenizer: Any, cfg: AgentProgramConfig) -> Gateway:
    """A started gateway serving `backend` to agent programs under `cfg`'s limits (one
    session per running episode, `max_calls` each, `timeout_s` + `GRACE_S` of life). A run
    starts one and keeps it (`arborl.train.rollout_modes.RunServices`); close it after."""
    life = cfg.timeout_s + GRACE_S
    limits = GatewayLimits(max_sessions=cfg.max_concurrent, max_pending=cfg.max_concurrent * 4,
                           max_calls_per_session=cfg.max_calls, session_timeout_s=life,
                           idle_timeout_s=life)  # fmt: skip
    gateway = Gateway(backend, tokenizer, limits=limits, tool_parser=cfg.tool_parser)
    gateway.start()
    return gateway


def run_agent_rollout(
    backend: Any,
    tokenizer: Any,
    pool: Any,
    seeds: Sequence[int],
    rollout_cfg: RolloutConfig,
    cfg: AgentProgramConfig,
    split: str = "train",
    env_id: str = "",
    program: AgentProgram | None = None,
    gateway: Gateway | None = None,
) -> RolloutResult:
    """`len(seeds) x rollout_cfg.group_size` episodes of the agent program, each in a
    session of `gateway` (the run's, serving `backend`; None: one started for this call)
    sampling at the rollout's settings; the step-view batch of their calls."""
    start = time.perf_counter()
    program = program or AgentProgram.from_config(cfg)
    reward_fn = load_entry_point(cfg.reward, "agent_program.reward") if cfg.reward else None
    tasks = agent_tasks(pool, seeds, rollout_cfg.group_size, split, env_id)
    base = rollout_cfg.seed
    ep_seeds = [None if base is None else row_seed(base, i) for i in range(len(tasks))]
    sampling = SamplingOverride(rollout_cfg.temperature, rollout_cfg.top_p, rollout_cfg.top_k,
                                rollout_cfg.max_new_tokens)  # fmt: skip
    if gateway is not None and gateway.backend is not backend:
        raise ValueError("run_agent_rollout: `gateway` serves another backend than `backend`; "
                         "start one over this backend (`start_gateway`)")  # fmt: skip
    with contextlib.ExitStack() as own:
        if gateway is None:
            gateway = own.enter_context(start_gateway(backend, tokenizer, cfg))
        outcomes = run_programs(program, tasks, gateway, cfg, ep_seeds, sampling)
    score(outcomes, tasks, pool, cfg, reward_fn)
    return _result(tasks, outcomes, rollout_cfg, cfg, split, env_id, tokenizer, start)


def _result(tasks, outcomes, rollout_cfg, cfg, split, env_id, tokenizer, start) -> RolloutResult:
    """The rollout's episodes, trajectories, stats and step-view batch from its outcomes."""
    run = uuid.uuid4().hex[:8]
    episodes = [
        episode_from_calls(i, t, rollout_cfg.group_size, o, run, cfg.max_calls)
        for i, (t, o) in enumerate(zip(tasks, outcomes))
    ]
    errors = [o.error for o in outcomes if o.error is not None]
    if errors:
        log.warning("%d of %d agent episodes failed: %s", len(errors), len(outcomes),
                    "; ".join(f"{e.reason}: {e.message}" for e in errors[:3]))  # fmt: skip
    trajectories = []
    for ep, o in zip(episodes, outcomes):
        traj = to_trajectory(ep, env_id, {"policy": "agent_program", "split": split})
        traj.meta["agent_calls"] = len(o.calls or [])
        if o.error is not None:
            traj.meta["env_error"] = f"agent {o.error.reason}: {o.error.message}"
        trajectories.append(traj)
    stats = episode_stats(episodes, time.perf_counter() - start)
    stats["agent_calls"] = float(sum(len(o.calls or []) for o in outcomes))
    for reason in ("crashed", "timeout", "no_reward"):
        stats[f"agent_{reason}"] = float(sum(e.reason == reason for e in errors))
    batch = build_batch(episodes, "step", tokenizer.pad_token_id)
    batch.info["temperature"] = rollout_cfg.temperature
    return RolloutResult(batch=batch, trajectories=trajectories, stats=stats, episodes=episodes)
