"""Rollout modes: how one RL step collects its training rows (`rollout.mode`).

A mode is a `RolloutMode` record registered under its name, as an algorithm is an
`Algorithm`: it declares its collect function, the evaluation it needs, the views it can
produce, whether it runs `rollout.async_envs`, the config section it reads and what it
needs of `agent.action_mode`. The trainer and the config ask the record; nothing compares
a mode's name. Its collect function has one signature,

    collect(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split) -> RolloutResult

where `rollout_cfg` is the step's `RolloutConfig` (seeded for this step) and `cfg` the whole
`TrainConfig`. The registry lives here, above both `arborl.rollout` and `arborl.search`, so
that neither has to know the other: `flat` is `arborl.rollout.run_rollout`, `tree` is
`arborl.search.training.tree_rollout`, `agent` is `arborl.rollout.agents.run_agent_rollout`
(a program you wrote, through the gateway). A new mode is one `register_rollout_mode`;
outside arborl, an entry point in the `arborl.rollout_modes` group names its record.

    res = rollout_step(backend, tokenizer, pool, seeds=seeds, rollout_cfg=rollout_cfg, cfg=cfg,
                       split=cfg.env.train_split)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from arborl.agent.config import ACTION_MODES, ActionMode
from arborl.registry import Registry
from arborl.rollout.config import VIEWS

CollectFn = Callable[..., Any]
"""`collect(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split) -> RolloutResult`."""


@dataclass(frozen=True)
class RolloutMode:
    """Everything the trainer and the config need to know about one `rollout.mode`."""

    name: str
    """The mode's one name, in configs, docs and this registry."""
    collect: CollectFn
    """One step's rollout (the signature in the module docstring)."""
    evaluate_share: str | None = None
    """A mode whose episodes are not arborl's prompt loop evaluates with its own share
    function: `"module:function"` with `arborl.train.evaluate.evaluate_share`'s signature
    and result (imported when asked for). None: the prompt loop's evaluation."""
    views: tuple[str, ...] = VIEWS
    """The `rollout.view`s the mode can produce."""
    async_envs: bool = False
    """Can it run `rollout.async_envs=true` (independent episodes)?"""
    section: str | None = None
    """The `TrainConfig` section the mode reads its settings from (None: none)."""
    needs_action: tuple[str, ...] = ()
    """Capabilities `agent.action_mode`'s `ActionMode` must declare true (its field names,
    e.g. `supports_tree`), checked at config load."""
    check: Callable[[Any], None] | None = None
    """Extra config rules of the mode, `check(train_cfg)` raising `ValueError` (e.g. that
    its section names something to run)."""


ROLLOUT_MODES: Registry[RolloutMode] = Registry(
    "rollout.mode",
    entry_point_group="arborl.rollout_modes",
    error=ValueError,
    message="{what}={name} is not one of: {known}.{hint}",
)
"""`rollout.mode` -> `RolloutMode` (or a `"module:attr"` naming one, imported on first use)."""

_CAPABILITIES = {f.name for f in fields(ActionMode) if f.type in (bool, "bool")}
"""What a rollout mode may ask of an action mode (`RolloutMode.needs_action`)."""


def register_rollout_mode(record: RolloutMode) -> RolloutMode:
    """Add `record` under `record.name` (a name already taken is replaced)."""
    unknown = sorted(set(record.needs_action) - _CAPABILITIES)
    if unknown:
        raise ValueError(
            f"rollout mode {record.name!r}: needs_action={unknown} are not ActionMode "
            f"capabilities; use some of {sorted(_CAPABILITIES)}"
        )
    ROLLOUT_MODES.register(record.name, record)
    return record


def get_rollout_mode(name: str) -> RolloutMode:
    """The record of `rollout.mode=name` (an unknown name lists the known ones)."""
    record = ROLLOUT_MODES.get(name)
    if not isinstance(record, RolloutMode):
        raise ValueError(
            f"rollout.mode={name!r} names a {type(record).__name__}, not an "
            "arborl.train.rollout_modes.RolloutMode; register a record with "
            "`register_rollout_mode` and name that"
        )
    return record


def _flat(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str):
    """Independent multi-turn episodes (`arborl.rollout.run_rollout`)."""
    from arborl.rollout import run_rollout

    return run_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent, split=split)


def _tree(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str):
    """One search tree per task, grown by the policy with the `search` section's settings
    (`arborl.search.training.tree_rollout`); every node is one step-view row."""
    from arborl.search.training import tree_rollout as grow

    return grow(backend, tokenizer, pool, seeds, rollout_cfg, cfg.search, cfg.agent, split=split)


def _agent(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str):
    """Episodes of the `agent_program` section's program, each talking to the policy
    through the training gateway (`arborl.rollout.agents`); every model call it made is one
    step-view row, token-exact. Held-out evaluation runs the program too."""
    from arborl.rollout.agents import run_agent_rollout

    return run_agent_rollout(
        backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent_program, split, cfg.env.id
    )


def _program_given(cfg: Any) -> None:
    if not cfg.agent_program.given:
        raise ValueError(
            "rollout.mode=agent runs an agent program you wrote, but none is set: give "
            "agent_program.fn=package.module:function or agent_program.command='python "
            "my_agent.py' (docs/agents.md)"
        )


register_rollout_mode(RolloutMode("flat", _flat, async_envs=True))
register_rollout_mode(
    RolloutMode("tree", _tree, views=("step",), section="search", needs_action=("supports_tree",))
)
register_rollout_mode(
    RolloutMode(
        "agent",
        _agent,
        "arborl.train.agent_eval:evaluate_agent_share",
        views=("step",),
        section="agent_program",
        needs_action=("supports_programs",),
        check=_program_given,
    )
)


def check_rollout_mode(rollout_cfg: Any, prefix: str = "rollout") -> RolloutMode:
    """The record of `rollout_cfg.mode`; raise `ValueError` if the mode cannot produce
    `rollout_cfg.view` or cannot run `rollout_cfg.async_envs`."""
    mode = get_rollout_mode(rollout_cfg.mode)
    if rollout_cfg.async_envs and not mode.async_envs:
        able = [n for n in ROLLOUT_MODES.names() if get_rollout_mode(n).async_envs]
        raise ValueError(
            f"{prefix}.async_envs=true needs a mode that runs independent episodes "
            f"({prefix}.mode in {able}), got {prefix}.mode={mode.name!r}; set "
            f"{prefix}.async_envs=false"
        )
    if rollout_cfg.view not in mode.views:
        raise ValueError(
            f"{prefix}.mode={mode.name!r} needs view in {list(mode.views)}, got "
            f"{prefix}.view={rollout_cfg.view!r}; set {prefix}.view={mode.views[0]}"
        )
    return mode


def check_modes(cfg: Any) -> None:
    """The train config's mode rules, asked of the records: the rollout mode's own checks
    (`check_rollout_mode`, its `check`) and every capability it needs of the action mode."""
    mode = check_rollout_mode(cfg.rollout)
    action: ActionMode = ACTION_MODES.get(cfg.agent.action_mode)
    for capability in mode.needs_action:
        if capability not in action.capabilities():
            able = [n for n in ACTION_MODES if capability in ACTION_MODES[n].capabilities()]
            has = action.capabilities()
            others = [n for n in ROLLOUT_MODES if set(ROLLOUT_MODES[n].needs_action) <= has]
            raise ValueError(
                f"rollout.mode={mode.name!r} needs an action mode with {capability}, and "
                f"agent.action_mode={action.name!r} has not: set agent.action_mode to one "
                f"of {able} or rollout.mode to one of {others}"
            )
    if mode.check is not None:
        mode.check(cfg)


def rollout_step(
    backend: Any,
    tokenizer: Any,
    pool: Any,
    *,
    seeds: Sequence[int],
    rollout_cfg: Any,
    cfg: Any,
    split: str,
) -> Any:
    """One RL step's rollout in mode `cfg.rollout.mode`: a `RolloutResult`. The mode's
    collect function takes the same arguments positionally; here they are named, since
    four of them would read alike at a call.

    rollout_cfg: the step's `RolloutConfig` (e.g. `replace(cfg.rollout, seed=step_seed)`);
    cfg: the `TrainConfig`; split: the env split the tasks come from."""
    collect = get_rollout_mode(cfg.rollout.mode).collect
    return collect(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split)
