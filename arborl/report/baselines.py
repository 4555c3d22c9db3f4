"""Baseline success rates of a run's env (random, oracle, and any other policy in
`arborl.rollout.policies.BASELINE_POLICIES`), computed once and kept in `baselines.json`.

They put the held-out curve on a scale: the random policy's floor and the oracle's
ceiling, on the run's evaluation split with the run's evaluation seed (so the same tasks
as its held-out evaluations, `arborl.rollout.collect_episodes` draws them the same way).
They need no model, so they cost a fraction of one evaluation; an env without an oracle
simply has no oracle line. An `arborl eval --json` file dropped in as `baselines.json`
(its `rows`) is read the same way.
"""

from __future__ import annotations

import json
import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

log = logging.getLogger("arborl")


def compute_baselines(config: dict[str, Any], max_episodes: int = 200) -> dict[str, dict]:
    """{policy: {success, success_lo, success_hi, episodes}} for the env of `config` (a
    resolved train config as a dict); policies that cannot run on the env are left out."""
    from arborl.envs import spec
    from arborl.rollout import RolloutConfig, collect_episodes
    from arborl.rollout.policies import BASELINE_POLICIES, make_policy

    env, ev = config.get("env", {}), config.get("eval", {})
    try:
        has_baselines = spec(env["id"]).baselines
    except KeyError:  # not registered in this process (a package env): collect_episodes says
        has_baselines = True
    if not has_baselines:  # e.g. free-text answers and an answer-reading oracle
        log.info(
            "report: %s registers no baselines (random and oracle mean nothing there)", env["id"]
        )
        return {}
    known = {f.name for f in fields(RolloutConfig)}
    roll = {k: v for k, v in config.get("rollout", {}).items() if k in known}
    cfg = RolloutConfig(**{**roll, "group_size": 1})
    n = min(int(ev.get("num_episodes", max_episodes)), max_episodes)
    seed = int(ev.get("seed", 0))
    out = {}
    # The run's own pool mode: a packaged env runs in its isolated interpreter, as in training.
    pool = {k: env[k] for k in ("timeout_s", "max_env_errors") if k in env}
    for name in BASELINE_POLICIES:
        policy = make_policy(name, cfg, seed=seed)
        try:
            res = collect_episodes(
                policy, env["id"], n, cfg, split=env.get("eval_split", "test"), seed=seed,
                env_kwargs=env.get("kwargs") or {}, pool_mode=env.get("pool_mode", "auto"),
                pool_options=pool,
            )  # fmt: skip
        except NotImplementedError as e:  # e.g. an env without an oracle: no line
            log.info("report: no %s baseline for %s (%s)", name, env.get("id"), e)
            continue
        except Exception as e:  # a report line is never worth failing the run it reports
            log.warning(
                "report: the %s baseline of %s failed (%s: %s); the report draws no %s line",
                name, env.get("id"), type(e).__name__, e, name,
            )  # fmt: skip
            continue
        s = res.stats
        out[name] = {
            "success": s["success"],
            "success_lo": s["success_lo"],
            "success_hi": s["success_hi"],
            "episodes": s["episodes"],
        }
    return out


def read_baselines(run_dir: Path) -> dict[str, dict]:
    """`baselines.json` of `run_dir` ({} when absent), ours or `arborl eval --json`'s. A
    file written before success had one name calls it `success_rate`: read as `success`."""
    path = Path(run_dir) / "baselines.json"
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    if "rows" in doc:  # an `arborl eval --json` file: its baseline rows
        doc = {r["policy"]: r for r in doc["rows"] if r["policy"] in ("random", "oracle")}
    return {name: _one_success_name(row) for name, row in doc.items()}


def _one_success_name(row: dict) -> dict:
    """`row` with an old `success_rate` key renamed `success` (where it has no `success`)."""
    if "success_rate" in row and "success" not in row:
        return {("success" if k == "success_rate" else k): v for k, v in row.items()}
    return row


def ensure_baselines(run_dir: Path, config: dict[str, Any]) -> dict[str, dict]:
    """The run's baselines: read from `baselines.json`, else computed and written there
    (nothing when the config names no env)."""
    path = Path(run_dir) / "baselines.json"
    if path.exists():
        return read_baselines(run_dir)
    if not config.get("env", {}).get("id"):
        return {}
    rows = compute_baselines(config)
    path.write_text(json.dumps(rows, indent=2))
    return rows
