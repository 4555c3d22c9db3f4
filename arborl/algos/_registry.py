"""The algos registries use the project's one registry helper (`arborl.registry`); this
module keeps the names `lookup` and `UnknownNameError` importable from `arborl.algos`."""

from __future__ import annotations

from arborl.registry import UnknownNameError, lookup

__all__ = ["UnknownNameError", "lookup"]
