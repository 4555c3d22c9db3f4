"""Search trees -> per-node advantages -> training episodes, one row each (`tree_episodes`).

Every non-root node is one decision (the parent's prompt, the node's response), so it is
one training row in the rollout loop's *step* layout (`arborl.rollout.batching`); the
row's reward is the node's advantage. Node values come from the tree itself (no critic):

    V(n) = mean outcome of the leaves below n (n itself when it is a leaf),
    outcome(leaf) = its return from the root, plus its evaluator value when the episode
                    is unfinished and `bootstrap` is on.

Advantage modes (`ADV_MODES`):
  - "mc_value": V(n) - V(parent)                      (VinePPO-style MC value difference)
  - "sibling":  (V(n) - mean_sib V) / (std_sib V + eps), over n's siblings incl. n
                (TreeRPO's sibling groups; a node without siblings gets 0)
  - "mc_sibling": the "mc_value" advantages z-scored within each sibling group
                (the two combined; the parent value cancels inside a group)
  - "treerl": ((V(n) - V(root)) + (V(n) - V(parent))) / sqrt(leaves below n)  (TreeRL)
Std is the population std (ddof=0), matching `arborl.algos.grpo`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from arborl.search.base import SearchTree

ADV_MODES = ("mc_value", "sibling", "mc_sibling", "treerl")


def leaf_outcome(tree: SearchTree, node_id: int, bootstrap: bool = True) -> float:
    n = tree[node_id]
    tail = n.value if (bootstrap and not n.done and n.value is not None) else 0.0
    return float(n.ret + tail)


def node_values(tree: SearchTree, bootstrap: bool = True) -> tuple[list[float], list[int]]:
    """(V(n), number of leaves below n) for every node, children before parents."""
    total = [0.0] * len(tree)
    count = [0] * len(tree)
    for n in reversed(tree.nodes):  # children always have larger ids than their parent
        if not n.children:
            total[n.id], count[n.id] = leaf_outcome(tree, n.id, bootstrap), 1
        if n.parent is not None:
            total[n.parent] += total[n.id]
            count[n.parent] += count[n.id]
    return [t / c for t, c in zip(total, count)], count


def _zscore(groups: dict[Any, list[int]], x: dict[int, float], eps: float) -> dict[int, float]:
    out = {}
    for ids in groups.values():
        if len(ids) < 2:
            out.update({i: 0.0 for i in ids})
            continue
        mean = sum(x[i] for i in ids) / len(ids)
        std = math.sqrt(sum((x[i] - mean) ** 2 for i in ids) / len(ids))
        out.update({i: (x[i] - mean) / (std + eps) for i in ids})
    return out


def tree_advantages(
    tree: SearchTree, mode: str = "mc_value", bootstrap: bool = True, eps: float = 1e-6
) -> dict[int, float]:
    """Advantage of every non-root node, by `mode` (see the module docstring)."""
    if mode not in ADV_MODES:
        raise ValueError(f"tree advantage mode={mode!r} is not one of {list(ADV_MODES)}")
    v, leaves = node_values(tree, bootstrap)
    nodes = [n for n in tree.nodes if n.parent is not None]
    diff = {n.id: v[n.id] - v[n.parent] for n in nodes}
    if mode == "mc_value":
        return diff
    if mode == "treerl":
        root = v[0]
        return {n.id: ((v[n.id] - root) + diff[n.id]) / math.sqrt(leaves[n.id]) for n in nodes}
    groups: dict[int, list[int]] = {}
    for n in nodes:
        groups.setdefault(n.parent, []).append(n.id)
    source = {n.id: v[n.id] for n in nodes} if mode == "sibling" else diff
    return _zscore(groups, source, eps)


def tree_episodes(
    trees: Sequence[SearchTree],
    mode: str = "mc_value",
    bootstrap: bool = True,
    task_ids: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    instruction: str = "",
) -> list:
    """One single-turn `EpisodeState` per token-carrying node of each tree.

    The turn's reward is the node's advantage, `group_id` its sibling group
    (`"<tree>:<parent>"`), so a group estimator over these rows normalises siblings."""
    from arborl.rollout.episode import EpisodeState, TurnRecord

    episodes = []
    for t, tree in enumerate(trees):
        adv = tree_advantages(tree, mode, bootstrap)
        values, _ = node_values(tree, bootstrap)
        for n in tree.nodes[1:]:
            if n.response_ids is None or n.prompt_ids is None:
                raise ValueError(
                    f"tree {t} node {n.id} has no token ids: only trees grown by an LM "
                    "proposer (LMProposer) export to training rows"
                )
            parent = tree[n.parent]
            info = {"won": n.won, "valid_action": n.valid_action, "node_value": values[n.id]}
            turn = TurnRecord(
                observation=parent.observation,
                action=n.action or "",
                response_text=n.response_text,
                format_ok=n.format_ok,
                anchor=parent.anchor,
                reward=float(adv[n.id]),
                terminated=n.terminated,
                truncated=n.truncated,
                info=info,
                prompt_ids=n.prompt_ids,
                response_ids=n.response_ids,
                logprobs=n.logprobs,
                finish_reason=n.finish_reason,
            )
            ep = EpisodeState(
                index=len(episodes),
                group_id=f"{t}:{n.parent}",
                traj_id=f"tree{t}-n{n.id}",
                seed=int(seeds[t]) if seeds is not None else t,
                task_id=str(task_ids[t]) if task_ids is not None else f"tree{t}",
                instruction=instruction,
                observation=n.observation,
                info=info,
                max_turns=1,
                turns=[turn],
                done=True,
            )
            episodes.append(ep)
    return episodes
