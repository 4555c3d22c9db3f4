"""Merge the rollout results of several workers into the one Batch the trainer expects.

Each worker pads its own rows to its own longest prompt P_w and response A_w, so the
step-view tensors of two workers have different widths. Merging re-lays every part out
to the common (P, A): prompts stay left-padded in columns [0, P) and responses start at
column P, the layout `arborl.train.update` relies on. Episode-view tensors are all
right-padded, so they only need padding to the longest row. Workers already offset their
`group_id`s by their first task's index, so groups stay distinct after the merge.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from arborl.data import Batch
from arborl.rollout.batching import holds_choices, pad_choices
from arborl.rollout.metrics import episode_stats

# step view: (R, P + A) tensors whose first P columns are the left-padded prompt.
PROMPT_RESPONSE = ("input_ids", "attention_mask")


def _relayout_step(b: Batch, p_len: int, a_len: int, pad_id: int) -> Batch:
    p0, a0 = int(b.info["prompt_length"]), int(b.info["response_length"])
    tensors = {}
    for k, v in b.tensors.items():
        if k in PROMPT_RESPONSE:
            fill = pad_id if k == "input_ids" else 0
            prompt = F.pad(v[:, :p0], (p_len - p0, 0), value=fill)
            response = F.pad(v[:, p0:], (0, a_len - a0), value=fill)
            tensors[k] = torch.cat([prompt, response], dim=1)  # (R, P + A)
        elif v.dim() == 2 and v.shape[1] == a0 and k not in ("cand_norm", "teacher_p"):
            tensors[k] = F.pad(v, (0, a_len - a0))  # (R, A) response-aligned
        else:
            tensors[k] = v
    info = {**b.info, "prompt_length": p_len, "response_length": a_len}
    return Batch(tensors, b.meta, info)


def _relayout_episode(b: Batch, length: int, pad_id: int) -> Batch:
    tensors = {}
    for k, v in b.tensors.items():
        if v.dim() == 2:
            fill = pad_id if k == "input_ids" else (-1 if k == "turn_index" else 0)
            tensors[k] = F.pad(v, (0, length - v.shape[1]), value=fill)
        else:
            tensors[k] = v
    return Batch(tensors, b.meta, dict(b.info))


def merge_batches(parts: Sequence[Batch]) -> Batch:
    """One Batch from the workers' Batches, in worker order, in a common layout."""
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        raise ValueError("merge_batches: no worker returned any rows")
    if len(parts) == 1:
        return parts[0]
    view = parts[0].info.get("view", "step")
    pad_id = int(parts[0].info.get("pad_token_id", 0))
    if view == "step":
        p_len = max(int(b.info["prompt_length"]) for b in parts)
        a_len = max(int(b.info["response_length"]) for b in parts)
        parts = [_relayout_step(b, p_len, a_len, pad_id) for b in parts]
        if holds_choices(parts[0]):  # scored choices: common (K, L) candidates
            k = max(b.tensors["cand_ids"].shape[1] for b in parts)
            length = max(b.tensors["cand_ids"].shape[2] for b in parts)
            parts = [pad_choices(b, k, length, pad_id) for b in parts]
        return Batch.concat(parts)
    length = max(b.tensors["input_ids"].shape[1] for b in parts)
    return Batch.concat([_relayout_episode(b, length, pad_id) for b in parts])


def merge_rollouts(results: Sequence[dict], wall_s: float):
    """(Batch, trajectories, stats) of the workers' `rollout` results (None = no share).

    Stats are recomputed over all episodes, so they equal what one process would report."""
    results = [r for r in results if r is not None]
    batch = merge_batches([r["batch"] for r in results])
    trajectories = [t for r in results for t in r["trajectories"]]
    episodes = [e for r in results for e in r["episodes"]]
    return batch, trajectories, episode_stats(episodes, wall_s)
