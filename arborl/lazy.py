"""Package attributes that import their module on first use (PEP 562).

`arborl.rollout` and `arborl.search` export names from modules that pull in torch, the
envs or numpy; `lazy_exports` lets `from arborl.rollout import RolloutConfig` (and
`arborl --help`) import only what is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str,
    namespace: dict[str, Any],
    exports: dict[str, tuple[str, ...]],
    own: tuple[str, ...] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`__getattr__`, `__dir__` and `__all__` for `package` (its globals: `namespace`),
    exporting every name of `exports` (module -> names) plus `own`, the public names the
    package defines itself. A loaded name is stored in `namespace`, so later lookups skip
    `__getattr__`."""
    module_of = {name: module for module, names in exports.items() for name in names}
    public = sorted([*module_of, *own])

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return public

    return __getattr__, __dir__, public
