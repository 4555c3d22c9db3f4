"""String-keyed env registry with lazy `"module:Class"` entry points (Gymnasium-style).

`register` records an `EnvSpec`; nothing is imported until `make` needs the class, so a
broken or heavy env never slows down or breaks the others. Ids are versioned
(`arborl/Sokoban-v0`). Every id is mirrored into Gymnasium's registry as a thin
`gymnasium.Env` wrapper with `Text` spaces, so `gymnasium.make("arborl/Sokoban-v0")` works
once `arborl.envs` is imported.

Third-party packages add envs through the `arborl.envs` entry-point group, read on the first
lookup: a value that loads to a class is registered under the entry point's name; any other
callable is called and is expected to call `register` itself. So that `gymnasium.make` finds
a plug-in right after `import arborl.envs`, `mirror_entry_points` (run by that import) gives
every entry point named by an env id a lazy Gymnasium spec (nothing of the plug-in is
imported until it is made); a registration function under another name is called then,
since only calling it tells which ids it registers.

A spec may name the env's search heuristic (`heuristic="module:function"`), so a game's
heuristic lives beside the game and search finds it by env id.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata
import inspect
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from arborl.registry import is_entry_point, load_entry_point

ENTRY_POINT_GROUP = "arborl.envs"
_ID_RE = re.compile(r"^(?:[\w.-]+/)?[\w.-]+-v\d+$")


@dataclass
class EnvSpec:
    """Everything needed to build an env by id."""

    id: str
    """Versioned id, e.g. `arborl/Sokoban-v0`."""
    entry_point: Any
    """`"module:Class"` (imported lazily) or a callable returning an env."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Default constructor kwargs; `make(id, **kw)` overrides them."""
    max_turns: int | None = None
    """Turn limit: passed as `max_turns=` to an env that takes it, else enforced by a
    `TurnLimit` wrapper; a `max_turns` the caller gives `make` replaces it (None: the env's
    own default)."""
    description: str = ""
    """One line for `arborl env list`."""
    heuristic: Any = None
    """The env's search heuristic: `"module:function"` (imported lazily) or a callable
    `fn(view) -> float` of an `arborl.envs.base.HeuristicView`; None when it has none."""
    baselines: bool = True
    """Whether the random and oracle policies' success puts a run on a scale (the report's
    and `arborl train`'s "for scale" lines); False for an env where they mean nothing
    (`arborl/Tasks-v0`: free-text answers, an oracle that reads the reference)."""

    def load(self) -> Any:
        """The class or factory behind `entry_point`."""
        if callable(self.entry_point):
            return self.entry_point
        return load_entry_point(str(self.entry_point), f"env {self.id!r}: entry_point")

    def load_heuristic(self) -> Any:
        """The function behind `heuristic`, or None when the env registered none."""
        if self.heuristic is None or callable(self.heuristic):
            return self.heuristic
        return load_entry_point(str(self.heuristic), f"env {self.id!r} heuristic")


_REGISTRY: dict[str, EnvSpec] = {}
_entry_points_loaded = False


def register(
    id: str,
    entry_point: Any = None,
    kwargs: dict[str, Any] | None = None,
    max_turns: int | None = None,
    description: str = "",
    heuristic: Any = None,
    baselines: bool = True,
) -> EnvSpec:
    """Register an env under a versioned `id`; re-registering an id replaces it.

    `heuristic` (`"module:function"` or a callable) is the env's search heuristic, found by
    `arborl.search.heuristic_evaluator(id)`; see `EnvSpec.heuristic`."""
    if not isinstance(id, str) or not _ID_RE.match(id):
        raise ValueError(
            f"env id {id!r} is not versioned: use 'namespace/Name-vN', e.g. 'me/Maze-v0'"
        )
    if entry_point is None:
        raise ValueError(f"register({id!r}): entry_point is required ('module:Class')")
    if heuristic is not None and not (callable(heuristic) or is_entry_point(heuristic)):
        raise ValueError(
            f"register({id!r}): heuristic={heuristic!r} must be 'module:function' or a "
            "callable fn(view) -> float"
        )
    env_spec = EnvSpec(
        id, entry_point, dict(kwargs or {}), max_turns, description, heuristic, baselines
    )
    _REGISTRY[id] = env_spec
    _register_with_gymnasium(id)
    return env_spec


def _load_entry_points() -> None:
    """Read the `arborl.envs` entry-point group once (on the first lookup)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if inspect.isclass(obj):
                register(ep.name, entry_point=ep.value)
            elif callable(obj):
                obj()
            else:
                raise TypeError(f"loaded {type(obj).__name__}, not a class or a callable")
        except Exception as e:  # a broken plug-in must not break every other env
            warnings.warn(
                f"arborl env entry point {ep.name!r} = {ep.value!r} (group "
                f"{ENTRY_POINT_GROUP!r}) failed to load and was skipped: {e!r}",
                RuntimeWarning,
                stacklevel=2,
            )


def mirror_entry_points() -> None:
    """Make every plug-in id visible to `gymnasium.make` without importing its module (see
    the module docstring); run once by `import arborl.envs`."""
    if _entry_points_loaded:
        return
    eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    if any(not _ID_RE.match(ep.name) for ep in eps):
        _load_entry_points()  # a registration function: its ids are known only once called
        return
    for ep in eps:
        if ep.name not in _REGISTRY:
            # `gymnasium.make` -> `make(id)` -> `spec(id)` reads the entry points then
            _register_with_gymnasium(ep.name)


def registered_ids() -> list[str]:
    """All registered ids, sorted (entry points included)."""
    _load_entry_points()
    return sorted(_REGISTRY)


def specs_of(ids: list[str]) -> dict[str, EnvSpec]:
    """The specs of those `ids` that are registered here, to hand to another process (a
    Ray worker) that may not have registered them: an env a script registered at run time
    is unknown to a process that only imported arborl. Pass them to `adopt` there."""
    _load_entry_points()
    return {i: _REGISTRY[i] for i in dict.fromkeys(ids) if i in _REGISTRY}


def adopt(specs: dict[str, EnvSpec]) -> None:
    """Register `specs` (from `specs_of` in another process) whose ids are unknown here; an
    id this process knows keeps its own spec. A class entry point travels by reference, so
    its module must be importable here (a `"module:Class"` string is imported on `make`)."""
    _load_entry_points()
    for id, env_spec in specs.items():
        if id not in _REGISTRY:
            _REGISTRY[id] = env_spec
            _register_with_gymnasium(id)


def spec(id: str) -> EnvSpec:
    """The `EnvSpec` of `id`; unknown ids raise `KeyError` naming the closest known ones."""
    _load_entry_points()
    if id in _REGISTRY:
        return _REGISTRY[id]
    close = difflib.get_close_matches(id, list(_REGISTRY), n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise KeyError(
        f"no env registered as {id!r}.{hint} Known ids: {', '.join(sorted(_REGISTRY))}. "
        "Register one with arborl.envs.register(id, 'module:Class')."
    )


def _keyword_params(creator: Any) -> list[str] | None:
    """The keyword arguments `creator` takes, or None when it takes any (`**kwargs`) or its
    signature cannot be read (builtins: let the call itself fail)."""
    try:
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in keyword]


def _check_kwargs(env_id: str, creator: Any, kwargs: dict[str, Any]) -> None:
    """Raise if `creator` cannot take a kwarg: a silently ignored knob is a wrong experiment."""
    accepted = _keyword_params(creator)
    bad = [] if accepted is None else sorted(set(kwargs) - set(accepted))
    if bad:
        raise TypeError(
            f"env {env_id!r} ({getattr(creator, '__qualname__', creator)}) does not accept "
            f"kwarg(s) {bad}; accepted: {accepted}"
        )


def unaccepted_kwargs(env_id: str, kwargs: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the keys of `kwargs` that `env_id`'s constructor does not take, the ones it takes),
    for a config check before any work. Nothing is reported when that cannot be told in
    this interpreter: an id not registered here or a class not importable here (an env
    package's, which runs in its own venv), or a constructor taking `**kwargs`."""
    try:
        creator = spec(env_id).load()
    except (KeyError, ImportError, AttributeError, ValueError):
        return [], []
    accepted = _keyword_params(creator)
    if accepted is None:
        return [], []
    return sorted(set(kwargs) - set(accepted) - {"max_turns"}), accepted


def make(id: str, **kwargs: Any) -> Any:
    """Build the env registered as `id`; `kwargs` override the spec's defaults.

    `max_turns` works for every env: passed on where the constructor takes it, enforced by
    a `TurnLimit` wrapper where it does not."""
    env_spec = spec(id)
    creator = env_spec.load()
    all_kwargs = {**env_spec.kwargs, **kwargs}
    turns = all_kwargs.pop("max_turns", None) or env_spec.max_turns  # the caller's, else the spec's
    limit = None  # the framework's turn limit, for an env that does not take `max_turns`
    if turns is not None:
        accepted = _keyword_params(creator)
        if accepted is None or "max_turns" in accepted:
            all_kwargs["max_turns"] = turns
        else:
            limit = turns
    _check_kwargs(id, creator, all_kwargs)
    env = creator(**all_kwargs)
    if limit is not None:
        from arborl.envs.wrappers import TurnLimit

        env = TurnLimit(env, limit)
    try:
        env.env_id = id  # a preset (Game24 on CountdownEnv) reports the id it was made as
    except AttributeError:
        pass  # envs with slots or a read-only id keep theirs
    return env


# --- Gymnasium mirror ---------------------------------------------------------------------


MAX_TEXT_LENGTH = 1 << 20
"""Longest observation or action the Gymnasium mirror's spaces contain (characters)."""


@functools.cache
def _gym_wrapper_class() -> type:
    """Build the `gymnasium.Env` wrapper class on first use (keeps gymnasium import lazy)."""
    import gymnasium
    from gymnasium.spaces import Text

    class AnyText(Text):
        """`Text` of any characters: Gymnasium's default charset is alphanumeric, so the
        boards, punctuation and newlines of text envs would be "not in the space".
        `sample()` still draws from the default charset (a valid string of this space)."""

        def contains(self, x: Any) -> bool:
            return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

        def __repr__(self) -> str:
            return f"AnyText({self.min_length}, {self.max_length})"

    class GymTextEnv(gymnasium.Env):
        """A `gymnasium.Env` over an arborl text env; spaces are `AnyText`."""

        metadata = {"render_modes": []}

        def __init__(self, arborl_id: str, **kwargs: Any) -> None:
            self.env = make(arborl_id, **kwargs)
            self.observation_space = AnyText(max_length=MAX_TEXT_LENGTH)
            self.action_space = AnyText(max_length=MAX_TEXT_LENGTH)

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            super().reset(seed=seed)
            return self.env.reset(seed=seed, options=options)

        def step(self, action: str):
            return self.env.step(action)

        def close(self) -> None:
            self.env.close()

    return GymTextEnv


def _make_gym_env(arborl_id: str, **kwargs: Any) -> Any:
    return _gym_wrapper_class()(arborl_id, **kwargs)


def _register_with_gymnasium(id: str) -> None:
    try:
        import gymnasium
    except ImportError:  # pragma: no cover - gymnasium is a core dependency
        return
    gymnasium.registry.pop(id, None)  # re-registering must not warn about overriding
    gymnasium.register(
        id=id,
        entry_point=functools.partial(_make_gym_env, id),
        disable_env_checker=True,
        order_enforce=True,
    )
