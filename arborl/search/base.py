"""The public protocols of `arborl.search`: what a search plugs together, and what it returns.

Every algorithm (`tot-bfs`, `tot-dfs`, `dfsdt`, `mcts`, `got`, `best-of-n`,
`self-consistency`, `beam-prm`) is a `Search`: `search.run(problem, budget, seed) ->
SearchResult`. A problem (`arborl.search.problem.Problem`) bundles three parts:

- an env, forked per branch with `snapshot()`/`restore()`, so that no branch ever sees
  another branch's mutable state (each node stores its own deep-copied snapshot);
- a `Proposer`: k distinct candidate actions for a node (an LM sampling, or the env's
  `available_actions`);
- an `Evaluator`: a score for each of a batch of nodes.

The Evaluator protocol (for value models, reward models, the policy judging itself, a
rollout to the end, or any user function):

    class MyEvaluator:
        name = "my-rm"
        uses_model = True          # its calls count against Budget.max_model_calls
        def score(self, views: Sequence[NodeView], *, seed: int) -> list[float]:
            ...                    # one float per view, same order; higher is better

`score` gets a batch of `NodeView`s (one model call for all of them is the point) and
returns one float per view, higher meaning "more likely to end in success". The
convention is a probability-like value in [0, 1] (1 = surely solvable, 0 = dead end);
MCTS backs values up as means and ToT compares them, so any monotone scale works, but
[0, 1] lets `tot-dfs` thresholds and `dfsdt` give-up levels mean the same thing across
evaluators. `seed` is derived from the search seed and the batch's first node path, so a
stochastic evaluator stays reproducible. An evaluator may keep a `num_tokens` attribute
(tokens it generated so far); the budget meter charges its increase to `max_tokens`.

A `NodeView` holds only what the env returned on the way to the node (observations,
rewards, `won`, `available_actions`) and what the policy wrote. It never holds the task
dict (Wordle's secret word, ToolQA's gold answer live there) nor `info['potential']`
(a privileged shaping signal computed from the true state): an evaluator cannot peek.

Seeds: a node's seed is `node_seed(root_seed, path)`, a function of the search seed and
the node's path of child indices, so the same seed gives the same tree whatever order
nodes were visited in, and no code here touches a global RNG.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

STOP_REASONS = (
    "solved",
    "exhausted",
    "done",
    "budget:max_nodes",
    "budget:max_model_calls",
    "budget:max_tokens",
    "budget:max_wall_s",
    "budget:max_depth",
)
"""Why a search stopped: a won node was found (and the search stops on wins), nothing was
left to expand, the algorithm finished its own schedule (e.g. all N samples of best-of-N),
or a budget limit was reached (`budget:<field>`)."""


def node_seed(root_seed: int, path: Sequence[int]) -> int:
    """A 63-bit seed for the node at `path` (child indices from the root) of a search."""
    ss = np.random.SeedSequence([int(root_seed) % (2**63), len(path), *map(int, path)])
    return int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


# --- what proposers and evaluators see and return -----------------------------------------
@dataclass(frozen=True)
class NodeView:
    """What a proposer or evaluator may see of a node: env outputs and policy text only."""

    node_id: int
    """The node's id in its tree."""
    path: tuple[int, ...]
    """Child indices from the root (the root's path is ())."""
    instruction: str
    """The env's instruction for the task (the text the agent is shown)."""
    observation: str
    """The env's observation at this node."""
    history: tuple[tuple[str, str], ...] = ()
    """(observation, response text) of every turn from the root to this node."""
    actions: tuple[str, ...] = ()
    """The actions taken from the root to this node."""
    rewards: tuple[float, ...] = ()
    """The env's reward for each of those steps."""
    done: bool = False
    """The env ended the episode here (terminated or truncated)."""
    won: bool = False
    """`info['won']` at this node."""
    valid_action: bool = True
    """`info['valid_action']` of the step that led here."""
    available_actions: tuple[str, ...] | None = None
    """`info['available_actions']` here, where the env gives a finite action set."""

    @property
    def depth(self) -> int:
        return len(self.actions)

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))


@dataclass
class Candidate:
    """One proposed action (with the tokens that produced it, for training)."""

    action: str
    """The action for the env (parsed from the response where an LM wrote it)."""
    response_text: str = ""
    """The raw response; equals `action` for non-LM proposers."""
    prior: float | None = None
    """Policy prior P(action) for PUCT (None: uniform)."""
    format_ok: bool = True
    """The response followed the agent's action format."""
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    """Sampling logprob of each generated token (None for non-LM proposers)."""
    finish_reason: str = "stop"


@runtime_checkable
class Proposer(Protocol):
    """Candidate actions for a batch of nodes.

    `propose(views, k, seeds=..., avoid=...)` returns, for each view, up to `k` candidates
    with *distinct* actions, none of them in that view's `avoid` list (DFSDT's diversity
    among siblings: the actions already tried from this node). `seeds[i]` seeds view i's
    sampling. Fewer than k (or none) means no more distinct actions could be found.
    """

    name: str
    uses_model: bool
    """True when each `propose` call is a model call (counted by `Budget.max_model_calls`)."""

    def propose(
        self,
        views: Sequence[NodeView],
        k: int,
        *,
        seeds: Sequence[int],
        avoid: Sequence[Sequence[str]] | None = None,
    ) -> list[list[Candidate]]: ...


@runtime_checkable
class Evaluator(Protocol):
    """A score per node, batched: see the module docstring for the contract."""

    name: str
    uses_model: bool
    """True when each `score` call is a model call (counted by `Budget.max_model_calls`)."""

    def score(self, views: Sequence[NodeView], *, seed: int) -> list[float]: ...


# --- budgets ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    """Limits a search must respect; None leaves a limit off. Checked before every action
    that would exceed it, so a search stops exactly at a limit (wall time is checked before
    each step: one step may finish past it)."""

    max_nodes: int | None = None
    """Env steps the search may take: every node added to the tree, and every step of a
    rollout that is not kept as a node. The root (the env's reset) is free."""
    max_model_calls: int | None = None
    """Calls to a proposer or evaluator whose `uses_model` is True."""
    max_tokens: int | None = None
    """Tokens generated by the proposer and by evaluators that report `num_tokens`."""
    max_wall_s: float | None = None
    """Wall-clock seconds from the start of `run`."""
    max_depth: int | None = None
    """Deepest node (number of actions from the root); nodes at it are not expanded."""

    def __post_init__(self) -> None:
        for name in ("max_nodes", "max_model_calls", "max_tokens", "max_depth"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"budget.{name}={v!r} must be an int >= 0 or None (no limit)")
        if self.max_wall_s is not None and not self.max_wall_s > 0:
            raise ValueError(f"budget.max_wall_s={self.max_wall_s!r} must be > 0 or None")


class BudgetExceeded(Exception):
    """Raised inside a search when a limit is reached; `run` turns it into a stop reason."""

    def __init__(self, limit: str) -> None:
        super().__init__(limit)
        self.limit = limit


class BudgetMeter:
    """Counts what a search spends and raises `BudgetExceeded` *before* a limit is passed.

    `clock` is injectable (a fake clock makes wall-time tests exact)."""

    def __init__(self, budget: Budget, clock: Callable[[], float] = time.perf_counter) -> None:
        self.budget, self.clock = budget, clock
        self.start = clock()
        self.nodes = 0
        self.rollout_steps = 0
        self.model_calls = 0
        self.proposer_calls = 0
        self.evaluator_calls = 0
        self.tokens = 0

    def elapsed(self) -> float:
        return self.clock() - self.start

    def check_time(self) -> None:
        b = self.budget
        if b.max_wall_s is not None and self.elapsed() >= b.max_wall_s:
            raise BudgetExceeded("max_wall_s")

    def can_step(self, n: int = 1) -> bool:
        """Whether `n` more env steps fit in `max_nodes`."""
        m = self.budget.max_nodes
        return m is None or self.nodes + self.rollout_steps + n <= m

    def charge_step(self, rollout: bool = False) -> None:
        """One env step (a new node, or a rollout step when `rollout`)."""
        self.check_time()
        if not self.can_step(1):
            raise BudgetExceeded("max_nodes")
        if rollout:
            self.rollout_steps += 1
        else:
            self.nodes += 1

    def before_call(self, uses_model: bool) -> None:
        """Check that one more call fits (model calls, tokens already at the limit, time)."""
        self.check_time()
        b = self.budget
        if uses_model and b.max_model_calls is not None and self.model_calls >= b.max_model_calls:
            raise BudgetExceeded("max_model_calls")
        if b.max_tokens is not None and self.tokens >= b.max_tokens:
            raise BudgetExceeded("max_tokens")

    def after_call(self, uses_model: bool, kind: str, tokens: int = 0) -> None:
        self.model_calls += int(uses_model)
        self.proposer_calls += int(kind == "proposer")
        self.evaluator_calls += int(kind == "evaluator")
        self.tokens += int(tokens)

    def tokens_left(self) -> int | None:
        m = self.budget.max_tokens
        return None if m is None else max(0, m - self.tokens)

    def depth_ok(self, depth: int) -> bool:
        """Whether a node at `depth` may be expanded (its children would be depth + 1)."""
        m = self.budget.max_depth
        return m is None or depth < m

    def stats(self) -> dict[str, float]:
        return {
            "nodes": self.nodes,
            "rollout_steps": self.rollout_steps,
            "model_calls": self.model_calls,
            "proposer_calls": self.proposer_calls,
            "evaluator_calls": self.evaluator_calls,
            "tokens": self.tokens,
            "wall_s": round(self.elapsed(), 4),
        }


# --- the tree as data ---------------------------------------------------------------------
@dataclass
class Node:
    """One node of a search tree (or graph: GoT nodes may have several parents)."""

    id: int
    parent: int | None
    path: tuple[int, ...]
    depth: int
    observation: str
    action: str | None = None
    response_text: str = ""
    reward: float = 0.0
    """The env's reward for the step into this node."""
    ret: float = 0.0
    """Undiscounted return from the root to this node."""
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    won: bool = False
    valid_action: bool = True
    available_actions: list[str] | None = None
    value: float | None = None
    """The evaluator's score, once evaluated."""
    prior: float | None = None
    visits: int = 0
    """MCTS visit count N."""
    value_sum: float = 0.0
    """MCTS total backed-up value W; Q = W / N (never a mean divided again)."""
    children: list[int] = field(default_factory=list)
    extra_parents: list[int] = field(default_factory=list)
    """GoT: further parents of an aggregated node."""
    kind: str = "step"
    """'root', 'step', or a GoT operation name."""
    pruned: bool = False
    answer: Any = None
    """The final answer (self-consistency) where the problem defines one."""
    format_ok: bool = True
    anchor: Any = None
    """`info['anchor']` at this node (the env's canonical state; for training rows only)."""
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    snapshot: Any = None
    """The env snapshot at this node (not exported: it may hold the hidden task)."""

    @property
    def q(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    _PRIVATE = ("snapshot", "prompt_ids", "response_ids", "logprobs", "anchor")

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in self._PRIVATE}
        d["path"] = list(self.path)
        d["q"] = self.q
        d["num_response_tokens"] = len(self.response_ids or [])
        return d


class SearchTree:
    """Nodes by id (creation order), the root at id 0."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, i: int) -> Node:
        return self.nodes[i]

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def add(self, node: Node) -> Node:
        if node.id != len(self.nodes):
            raise ValueError(f"node id {node.id} must be the next id {len(self.nodes)}")
        self.nodes.append(node)
        if node.parent is not None:
            self.nodes[node.parent].children.append(node.id)
        return node

    def path_ids(self, node_id: int) -> list[int]:
        """Ids from the root to `node_id` (first parents only)."""
        out = []
        cur: int | None = node_id
        while cur is not None:
            out.append(cur)
            cur = self.nodes[cur].parent
        return out[::-1]

    def leaves(self) -> list[Node]:
        return [n for n in self.nodes if not n.children]

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [n.to_dict() for n in self.nodes]}

    def digest(self) -> str:
        """A hash of the tree's content (no timings): equal trees, equal digests."""
        doc = [n.to_dict() for n in self.nodes]
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class SearchResult:
    """What a search returns."""

    algo: str
    best: list[int]
    """Node ids from the root to the best node found."""
    tree: SearchTree
    stop_reason: str
    """One of `STOP_REASONS`."""
    stats: dict[str, Any]
    """Budget use (nodes, model_calls, tokens, wall_s, ...) and algorithm figures."""
    answer: Any = None
    """Self-consistency's majority answer (None elsewhere)."""
    seed: int = 0
    task_id: str | None = None
    """`info['task_id']` of the searched task (a stable id, not the task itself)."""

    @property
    def best_node(self) -> Node:
        return self.tree[self.best[-1]]

    @property
    def won(self) -> bool:
        return bool(self.best_node.won)

    @property
    def actions(self) -> list[str]:
        return [a for a in (self.tree[i].action for i in self.best[1:]) if a is not None]

    def to_dict(self, with_tree: bool = True) -> dict[str, Any]:
        d = {
            "algo": self.algo,
            "won": self.won,
            "actions": self.actions,
            "return": self.best_node.ret,
            "best": list(self.best),
            "stop_reason": self.stop_reason,
            "stats": self.stats,
            "answer": self.answer,
            "seed": self.seed,
            "task_id": self.task_id,
        }
        if with_tree:
            d["tree"] = self.tree.to_dict()
        return d


@runtime_checkable
class Search(Protocol):
    """A search algorithm: `run(problem, budget, seed) -> SearchResult`."""

    name: str

    def run(self, problem: Any, budget: Budget, seed: int = 0) -> SearchResult: ...
