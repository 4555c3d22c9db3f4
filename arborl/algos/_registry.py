"""String-keyed lookup shared by the algos registries.

Every registry in `arborl.algos` is a plain `dict[str, T]`; this module only gives them one
loud error, so a typo in a config names the value, the known names and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not in a registry. A `KeyError` whose message reads as plain text."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


def lookup(registry: Mapping[str, T], name: str, what: str) -> T:
    """Return `registry[name]`, or raise `UnknownNameError` listing the known names.

    `what` is the argument being looked up (e.g. "adv_estimator"), used in the message.
    """
    try:
        return registry[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(registry))
        raise UnknownNameError(f"{what}={name!r} is not known; use one of: {known}") from None
