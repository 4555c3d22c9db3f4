"""Rollout modes: how one RL step collects its training rows (`rollout.mode`).

A mode is a `RolloutMode` record registered under its name, as an algorithm is an
`Algorithm`: it declares its collect function, the evaluation it needs, the views it can
produce, whether it runs `rollout.async_envs`, the config section it reads and what it
needs of `agent.action_mode`. The trainer and the config ask the record; nothing compares
a mode's name. Its collect function has one signature,

    collect(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split) -> RolloutResult

where `rollout_cfg` is the step's `RolloutConfig` (seeded for this step) and `cfg` the whole
`TrainConfig`, plus `service=` for a mode that declares a run-long `service` (the agent
mode's gateway, held by the engine's `RunServices`). The registry lives here, above both `arborl.rollout` and `arborl.search`, so
that neither has to know the other: `flat` is `arborl.rollout.run_rollout`, `tree` is
`arborl.search.training.tree_rollout`, `program` (formerly `agent`) is
`arborl.rollout.agents.run_agent_rollout` (your agent program, through the gateway). A new
mode is one `register_rollout_mode`;
outside arborl, an entry point in the `arborl.rollout_modes` group names its record.

    res = rollout_step(backend, tokenizer, pool, seeds=seeds, rollout_cfg=rollout_cfg, cfg=cfg,
                       split=cfg.env.train_split, services=run_services)
"""

from __future__ import annotations

import warnings
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
    distributed: bool = False
    """Can the Ray engine's rollout workers run it (`trainer.engine=ray`)?"""
    section: str | None = None
    """The `TrainConfig` section the mode reads its settings from (None: none)."""
    needs_action: tuple[str, ...] = ()
    """Capabilities `agent.action_mode`'s `ActionMode` must declare true (its field names,
    e.g. `supports_tree`), checked at config load."""
    check: Callable[[Any], None] | None = None
    """Extra config rules of the mode, `check(train_cfg)` raising `ValueError` (e.g. that
    its section names something to run)."""
    former_names: tuple[str, ...] = ()
    """Names the mode had before (still accepted, with a `FutureWarning` naming this one)."""
    service: Callable[[Any, Any, Any], Any] | None = None
    """A server the mode's episodes talk to for the whole run (the program mode's gateway):
    `service(backend, tokenizer, train_cfg)` starts one (an object with `close()`). The
    engine's `RunServices` starts it on the first rollout or evaluation, passes it to
    `collect` and `evaluate_share` as `service=`, and closes it with the run's pools.
    None: the mode needs none."""


class RunServices:
    """The rollout mode's run-long services (`RolloutMode.service`), owned by an engine as
    its `PoolSet` is: each started on first use, kept, and closed by `close`."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[Any, Any]] = {}
        """mode name -> (the backend it serves, the service)."""

    def get(self, mode: RolloutMode, backend: Any, tokenizer: Any, cfg: Any) -> Any:
        """`mode`'s service over `backend` (started now if it is not yet; one over another
        backend, e.g. a restarted vLLM, is closed and replaced); None for a mode without."""
        if mode.service is None:
            return None
        held = self._held.get(mode.name)
        if held is not None and held[0] is backend:
            return held[1]
        if held is not None:
            held[1].close()
        service = mode.service(backend, tokenizer, cfg)
        self._held[mode.name] = (backend, service)
        return service

    def close(self) -> None:
        """Close every service (idempotent)."""
        held, self._held = list(self._held.values()), {}
        for _, service in held:
            service.close()


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
    """The record of `rollout.mode=name`, or of the mode that once had that name (an
    unknown name lists the known ones)."""
    if name not in ROLLOUT_MODES:
        renamed = [ROLLOUT_MODES[n] for n in ROLLOUT_MODES if name in _former(ROLLOUT_MODES[n])]
        if renamed:
            return renamed[0]
    fix = "register a record with `register_rollout_mode` and name that"
    return ROLLOUT_MODES.get_record(name, RolloutMode, "rollout.mode", fix)


def _former(record: Any) -> tuple[str, ...]:
    return record.former_names if isinstance(record, RolloutMode) else ()


def _flat(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str):
    """Independent multi-turn episodes (`arborl.rollout.run_rollout`)."""
    from arborl.rollout import run_rollout

    return run_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent, split=split)


def _tree(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str):
    """One search tree per task, grown by the policy with the `search` section's settings
    (`arborl.search.training.tree_rollout`); every node is one step-view row."""
    from arborl.search.training import tree_rollout as grow

    return grow(backend, tokenizer, pool, seeds, rollout_cfg, cfg.search, cfg.agent, split=split)


def _program(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str, service=None):
    """Episodes of the `agent_program` section's program, each talking to the policy
    through the run's gateway (`service`; `arborl.rollout.agents`); every model call it
    made is one step-view row, token-exact. Held-out evaluation runs the program too."""
    from arborl.rollout.agents import run_agent_rollout

    return run_agent_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent_program,
                             split, cfg.env.id, gateway=service)  # fmt: skip


def _gateway(backend, tokenizer, cfg):
    """The run's gateway (`arborl.rollout.agents.start_gateway`), serving `backend`."""
    from arborl.rollout.agents import start_gateway

    return start_gateway(backend, tokenizer, cfg.agent_program)


def _program_given(cfg: Any) -> None:
    if not cfg.agent_program.given:
        raise ValueError(
            "rollout.mode=program runs an agent program you wrote, but none is set: give "
            "agent_program.fn=package.module:function or agent_program.command='python "
            "my_agent.py' (docs/agents.md)"
        )


register_rollout_mode(RolloutMode("flat", _flat, async_envs=True, distributed=True))
register_rollout_mode(
    RolloutMode("tree", _tree, views=("step",), section="search", needs_action=("supports_tree",))
)
register_rollout_mode(
    RolloutMode(
        "program",
        _program,
        "arborl.train.agent_eval:evaluate_agent_share",
        views=("step",),
        section="agent_program",
        needs_action=("supports_programs",),
        check=_program_given,
        former_names=("agent",),
        service=_gateway,
    )
)


def check_rollout_mode(rollout_cfg: Any, prefix: str = "rollout") -> RolloutMode:
    """The record of `rollout_cfg.mode`; raise `ValueError` if the mode cannot produce
    `rollout_cfg.view` or cannot run `rollout_cfg.async_envs`."""
    mode = get_rollout_mode(rollout_cfg.mode)
    if mode.name != rollout_cfg.mode:  # a former name: the config says the current one
        warnings.warn(f"{prefix}.mode={rollout_cfg.mode} is now {prefix}.mode={mode.name}; "
                      "the old name will go", FutureWarning, stacklevel=2)  # fmt: skip
        rollout_cfg.mode = mode.name
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
    services: RunServices | None = None,
) -> Any:
    """One RL step's rollout in mode `cfg.rollout.mode`: a `RolloutResult`. The mode's
    collect function takes the same arguments positionally; here they are named, since
    four of them would read alike at a call.

    rollout_cfg: the step's `RolloutConfig` (e.g. `replace(cfg.rollout, seed=step_seed)`);
    cfg: the `TrainConfig`; split: the env split the tasks come from; services: the run's
    (a mode with a `service` gets it as `service=`; None: the mode starts its own)."""
    mode = get_rollout_mode(cfg.rollout.mode)
    return mode.collect(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split,
                        **service_arg(mode, services, backend, tokenizer, cfg))  # fmt: skip


def service_arg(mode: RolloutMode, services: RunServices | None, backend, tokenizer, cfg) -> dict:
    """`{"service": ...}` for a mode that declares one and a run that holds `services`,
    else `{}` (so a mode without a service keeps its plain signature)."""
    if services is None or mode.service is None:
        return {}
    return {"service": services.get(mode, backend, tokenizer, cfg)}
