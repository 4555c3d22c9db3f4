"""String-keyed registries of searches, proposers and evaluators (ids for config and CLI).

All three are `arborl.registry.Registry` objects whose entries are `"module:attr"`
strings, imported on first use, so listing or checking ids (config validation, `--help`)
imports no search code. An unknown id raises listing the known ids (with a
did-you-mean); an unknown parameter raises listing the accepted ones.

- `ALGORITHMS`: search id -> a class with `run(problem, budget, seed)`.
- `PROPOSERS`: proposer id -> `factory(backend, tokenizer, **kw)` (`arborl.search.builders`).
- `EVALUATORS`: evaluator id -> `factory(arg, *, env_id, backend, tokenizer, rollout_depth,
  heuristic_fallback)`; `arg` is what follows the id's colon (`rm:PATH_OR_URL`), else None.
"""

from __future__ import annotations

import inspect
from typing import Any

from arborl.registry import Registry

ALGORITHMS: Registry[type] = Registry(
    "search algorithm", message="unknown {what} {name}.{hint} Known: {known}"
)
"""Search id -> `"module:Class"`."""
for _name, _entry in (
    ("tot-bfs", "arborl.search.tot:ToTBFS"),
    ("tot-dfs", "arborl.search.tot:ToTDFS"),
    ("dfsdt", "arborl.search.dfsdt:DFSDT"),
    ("mcts", "arborl.search.mcts:MCTS"),
    ("got", "arborl.search.got:GoT"),
    ("best-of-n", "arborl.search.sampling:BestOfN"),
    ("self-consistency", "arborl.search.sampling:SelfConsistency"),
    ("beam-prm", "arborl.search.beam:BeamPRM"),
):
    ALGORITHMS.register(_name, _entry)

PROPOSERS: Registry = Registry("proposer", error=ValueError)
"""`actions`: the env's available_actions; `policy`: the LM samples k distinct actions;
`ranked`: the env's available_actions scored as `agent.action_mode=score` scores them
(its categorical gives the PUCT priors)."""
for _name in ("actions", "policy", "ranked"):
    PROPOSERS.register(_name, f"arborl.search.builders:{_name}_proposer")

EVALUATORS: Registry = Registry(
    "evaluator",
    error=ValueError,
    message="{what}={name} is not known; use one of: {known} or rm:PATH_OR_URL (a reward "
    "model).{hint}",
)
"""`heuristic`: the env's built-in heuristic; `rollout`: a proposer rollout of
`rollout_depth` steps; `judge`: the policy's P(yes) to "can this still be solved?";
`none`: the return so far; `rm:PATH_OR_URL`: a reward model (`arborl rm train` output or an
`arborl rm serve` URL; the token comes from ARBORL_TOKEN)."""
for _name in ("heuristic", "rollout", "judge", "none", "rm"):
    EVALUATORS.register(_name, f"arborl.search.builders:{_name}_evaluator")
ARG_EVALUATORS = ("rm",)
"""Evaluator ids written with an argument, `ID:ARG` (`rm:PATH_OR_URL`)."""


def is_evaluator_name(text: str) -> bool:
    """Whether `text` names an evaluator: a plain id, or `rm:PATH_OR_URL`."""
    key, sep, arg = text.partition(":")
    return key in EVALUATORS and (bool(sep and arg) if key in ARG_EVALUATORS else not sep)


def register_search(name: str, entry: Any) -> None:
    """Add a search id (a `"module:Class"`, or the class, with `run(problem, budget, seed)`)."""
    ALGORITHMS.register(name, entry)


def search_params(name: str) -> dict[str, Any]:
    """The constructor parameters of search `name` with their defaults."""
    cls = get_search_class(name)
    sig = inspect.signature(cls.__init__)
    return {p.name: p.default for p in list(sig.parameters.values())[1:]}


def get_search_class(name: str) -> type:
    return ALGORITHMS.get(name)


def make_search(name: str, **params: Any) -> Any:
    """The search `name` built with `params` (unknown params raise listing the valid ones)."""
    cls = get_search_class(name)
    accepted = search_params(name)
    bad = sorted(set(params) - set(accepted))
    if bad:
        raise TypeError(f"search {name!r} has no parameter(s) {bad}; it accepts {sorted(accepted)}")
    return cls(**params)
