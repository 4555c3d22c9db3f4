"""String-keyed registries of searches, proposers and evaluators (ids for config and CLI).

Entries are `"module:Class"` strings, imported on first use. An unknown id raises listing
the known ids (with a did-you-mean); an unknown parameter raises listing the accepted ones.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any

from arborl.algos import UnknownNameError

ALGORITHMS: dict[str, str] = {
    "tot-bfs": "arborl.search.tot:ToTBFS",
    "tot-dfs": "arborl.search.tot:ToTDFS",
    "dfsdt": "arborl.search.dfsdt:DFSDT",
    "mcts": "arborl.search.mcts:MCTS",
    "got": "arborl.search.got:GoT",
    "best-of-n": "arborl.search.sampling:BestOfN",
    "self-consistency": "arborl.search.sampling:SelfConsistency",
    "beam-prm": "arborl.search.beam:BeamPRM",
}
"""Search id -> `"module:Class"`."""


def _unknown(name: str, known: list[str], what: str) -> UnknownNameError:
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return UnknownNameError(f"unknown {what} {name!r}.{hint} Known: {', '.join(sorted(known))}")


def load_entry(entry: str) -> Any:
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


def register_search(name: str, entry: str) -> None:
    """Add a search id (a `"module:Class"` whose class has `run(problem, budget, seed)`)."""
    ALGORITHMS[name] = entry


def search_params(name: str) -> dict[str, Any]:
    """The constructor parameters of search `name` with their defaults."""
    cls = get_search_class(name)
    sig = inspect.signature(cls.__init__)
    return {p.name: p.default for p in list(sig.parameters.values())[1:]}


def get_search_class(name: str) -> type:
    if name not in ALGORITHMS:
        raise _unknown(name, list(ALGORITHMS), "search algorithm")
    return load_entry(ALGORITHMS[name])


def make_search(name: str, **params: Any) -> Any:
    """The search `name` built with `params` (unknown params raise listing the valid ones)."""
    cls = get_search_class(name)
    accepted = search_params(name)
    bad = sorted(set(params) - set(accepted))
    if bad:
        raise TypeError(f"search {name!r} has no parameter(s) {bad}; it accepts {sorted(accepted)}")
    return cls(**params)
