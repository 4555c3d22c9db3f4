"""The one registry helper every plug-in kind uses (algos, reward sources, searches, pool
modes, backends, engines, rollout modes, curate scorers and formats, action formats).

A `Registry` maps a string key to an object, or to a `"module:attr"` string that is
imported on first `get` (so a heavy or broken plug-in costs nothing until it is asked
for). An unknown name raises `UnknownNameError` naming the registry, the value, a
did-you-mean and every known name. `load_entry_point("pkg.mod:attr")` is the same import
with the same loud errors, for config fields that take a user's `module:attr` directly.

This module imports only the standard library: it sits below every arborl package.

    ESTIMATORS = Registry("adv_estimator")
    ESTIMATORS.register("grpo", grpo)               # an object
    ESTIMATORS.register("mine", "mypkg.adv:mine")   # imported on first get
    @ESTIMATORS.register("rloo")                    # or as a decorator
    def rloo(...): ...
    fn = ESTIMATORS.get(cfg.algo.name)
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not in a registry. A `KeyError` whose message reads as plain text."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


def did_you_mean(name: object, known: list[str]) -> str:
    """' Did you mean 'x'?' for the closest known name, or ''."""
    close = difflib.get_close_matches(str(name), known, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def is_entry_point(value: object) -> bool:
    """True for a `"module:attr"` string (a dotted module path, one colon, an attribute)."""
    if not isinstance(value, str):
        return False
    module, sep, attr = value.partition(":")
    return bool(sep and module and attr and ":" not in attr and " " not in value)


def load_entry_point(spec: str, what: str = "entry point") -> Any:
    """Import `"pkg.module:attr"` (attr may be dotted, `mod:Class.method`) and return it.

    `what` names the field being resolved in the errors (e.g. `curate.quality.scorer`)."""
    if not is_entry_point(spec):
        raise ValueError(f"{what}={spec!r} is not of the form 'package.module:attribute'")
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(
            f"{what}={spec!r}: cannot import module {module_name!r} ({e}); install it or fix "
            "the module path"
        ) from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(
                f"{what}={spec!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj


class Registry(Generic[T]):
    """String key -> object (or lazy `"module:attr"`); `get` with did-you-mean errors.

    `what` is the config field or concept the keys name (it opens every error);
    `allow_entry_points` lets `get` also accept an unregistered `"module:attr"` key;
    `entry_point_group` names an entry-point group (`[project.entry-points."GROUP"]` in a
    plug-in's pyproject) whose `name = "module:attr"` entries are registered lazily the
    first time a name is looked up or listed (imported only when that name is asked for);
    `error` is an extra exception base for the unknown-name error (e.g. `ValueError`
    where callers have always caught that), and `message` its text, formatted with
    `what`, `name` (repr), `hint` (the did-you-mean, may be empty) and `known`."""

    DEFAULT_MESSAGE = "{what}={name} is not known; use one of: {known}.{hint}"

    def __init__(
        self,
        what: str,
        *,
        allow_entry_points: bool = False,
        entry_point_group: str | None = None,
        error: type[Exception] | None = None,
        message: str | None = None,
    ) -> None:
        self.what = what
        self.allow_entry_points = allow_entry_points
        self.entry_point_group = entry_point_group
        self._group_read = entry_point_group is None
        self.message = message or self.DEFAULT_MESSAGE
        self._error = (
            UnknownNameError
            if error is None or issubclass(UnknownNameError, error)
            else type("UnknownNameError", (UnknownNameError, error), {})
        )
        self._entries: dict[str, Any] = {}

    def register(self, name: str, obj: Any = None, *, replace: bool = True) -> Any:
        """Add `name` -> `obj` (an object or a `"module:attr"` string); without `obj`, a
        decorator. `replace=False` refuses a name that is already taken."""
        if obj is None:

            def deco(fn: T) -> T:
                self.register(name, fn, replace=replace)
                return fn

            return deco
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"{self.what}: a registry key must be a non-empty string, got {name!r}"
            )
        if not replace and name in self._entries:
            raise ValueError(f"{self.what}={name!r} is already registered")
        self._entries[name] = obj
        return obj

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def pop(self, name: str, *default: Any) -> Any:
        """Remove `name` and return what was registered (not imported); with a `default`,
        a missing name returns it instead of raising."""
        if name in self._entries or not default:
            if name not in self._entries:
                raise self.unknown(name)
            return self._entries.pop(name)
        return default[0]

    def _read_group(self) -> None:
        """Register the entry-point group's names once (a name registered in code wins)."""
        if self._group_read:
            return
        self._group_read = True
        import importlib.metadata

        for ep in importlib.metadata.entry_points(group=self.entry_point_group):
            self._entries.setdefault(ep.name, ep.value)

    def get(self, name: str) -> T:
        """The object behind `name` (imported on first use if registered as a string)."""
        if name not in self._entries:
            self._read_group()
        try:
            entry = self._entries[name]
        except (KeyError, TypeError):
            if self.allow_entry_points and is_entry_point(name):
                return load_entry_point(name, self.what)
            raise self.unknown(name) from None
        if isinstance(entry, str) and is_entry_point(entry):
            entry = load_entry_point(entry, f"{self.what}={name!r}")
            self._entries[name] = entry  # later lookups skip the import
        return entry

    def unknown(self, name: object) -> UnknownNameError:
        """The error for a name that is not here (for callers that check first)."""
        known = self.names()
        listed = ", ".join(known) or "(none)"
        if self.allow_entry_points:
            listed += " (or a 'module:attr' entry point)"
        text = self.message.format(
            what=self.what, name=repr(name), hint=did_you_mean(name, known), known=listed
        )
        return self._error(text)

    def get_record(self, name: str, cls: type, key: str, fix: str, error: type = ValueError):
        """`get(name)`, which must be a `cls` record: else `error` naming the config `key`,
        what `name` names instead, and `fix` (how to register one)."""
        record = self.get(name)
        if not isinstance(record, cls):
            raise error(
                f"{key}={name!r} names a {type(record).__name__}, not an "
                f"{cls.__module__}.{cls.__qualname__}; {fix}"
            )
        return record

    def names(self) -> list[str]:
        self._read_group()
        return sorted(self._entries)

    def accepts(self, name: object) -> bool:
        """Would `get(name)` find something: a registered name (entry-point group
        included) or, with `allow_entry_points`, any `"module:attr"` string."""
        if name in self:
            return True
        return self.allow_entry_points and is_entry_point(name)

    def in_order(self) -> list[str]:
        """Names in registration order (for lookups that try entries in turn)."""
        self._read_group()
        return list(self._entries)

    def entry(self, name: str) -> Any:
        """What was registered under `name`, without importing it."""
        if name not in self:
            raise self.unknown(name)
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            self._read_group()
        return name in self._entries

    # Mapping-style access, so code and tests that treated a registry as a dict keep working.
    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __setitem__(self, name: str, obj: Any) -> None:
        self.register(name, obj)

    def __delitem__(self, name: str) -> None:
        self.pop(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {self.names()})"
