"""Dispatch/collect modes and the merge of worker Batches (pure functions, no Ray)."""

import numpy as np
import pytest
import torch

from arborl.data import Batch
from arborl.distributed.dispatch import COLLECT_MODES, DISPATCH_MODES, method_modes, register
from arborl.distributed.engine import shares, worker_seed
from arborl.distributed.merge import merge_batches
from arborl.distributed.workers import RolloutRole, TrainRole


def _rows(n, start=0):
    return Batch.from_dict(
        {"x": torch.arange(start, start + n), "response_mask": torch.ones(n, 2)},
        meta={"tag": [f"r{i}" for i in range(start, start + n)]},
    )


def test_dp_split_pads_to_equal_chunks_and_concat_drops_the_padding():
    # 5 rows over 2 ranks: pad 1 copy of row 0 -> chunks [0 1 2] [3 4 0].
    calls, pad = DISPATCH_MODES["dp_split"](2, (_rows(5), 0.5), {})
    assert pad == 1
    assert [a[0].tensors["x"].tolist() for a, _ in calls] == [[0, 1, 2], [3, 4, 0]]
    assert all(a[1] == 0.5 for a, _ in calls)  # the other arguments go to every rank
    merged = COLLECT_MODES["dp_concat"]([a[0] for a, _ in calls], pad)
    assert merged.tensors["x"].tolist() == [0, 1, 2, 3, 4]
    assert merged.meta["tag"].tolist() == [f"r{i}" for i in range(5)]


def test_dp_minibatches_give_each_rank_its_chunk_and_the_global_counts():
    mbs = [_rows(3), _rows(1, start=3)]  # the second minibatch has fewer rows than ranks
    calls, _ = DISPATCH_MODES["dp_minibatches"](2, (mbs, "tmpl"), {})
    r0, r1 = calls[0][0][0], calls[1][0][0]
    assert [b.tensors["x"].tolist() for b in r0] == [[0, 1], [3]]
    assert r1[0].tensors["x"].tolist() == [2] and r1[1] is None
    # Global denominators of each whole minibatch: 3 rows x 2 tokens, then 1 x 2.
    assert (r0[0].info["num_seqs"], r0[0].info["num_tokens"]) == (3.0, 6.0)
    assert (r1[0].info["num_seqs"], r0[1].info["num_seqs"]) == (3.0, 1.0)
    assert calls[1][0][1] == "tmpl"


def test_register_rejects_unknown_modes_and_methods_declare_theirs():
    with pytest.raises(KeyError, match="dispatch='dp_spilt' is not known; use one of"):
        register(dispatch="dp_spilt")
    assert method_modes(TrainRole, "ref_logp") == ("dp_split", "dp_concat")
    assert method_modes(TrainRole, "update_actor") == ("dp_minibatches", "rank_zero")
    assert method_modes(RolloutRole, "rollout") == ("per_worker", "all")
    with pytest.raises(AttributeError, match="no method 'rollot'"):
        method_modes(RolloutRole, "rollot")


def test_shares_split_tasks_contiguously_and_worker_0_keeps_the_local_seed():
    assert shares([10, 11, 12, 13, 14], 2) == [(0, [10, 11, 12]), (3, [13, 14])]
    assert worker_seed(123, 0, 5) == 123  # 1 worker samples exactly as local mode
    assert len({worker_seed(123, w, 5) for w in range(4)}) == 4


def _step_part(prompts, responses, group_offset):
    """A step-view part laid out as arborl.rollout.batching does (pad id 9)."""
    P, A = max(len(p) for p in prompts), max(len(r) for r in responses)
    n = len(prompts)
    ids = torch.full((n, P + A), 9)
    attn = torch.zeros(n, P + A, dtype=torch.long)
    rmask = torch.zeros(n, A)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, P - len(p) : P] = torch.tensor(p)
        ids[i, P : P + len(r)] = torch.tensor(r)
        attn[i, P - len(p) : P + len(r)] = 1
        rmask[i, : len(r)] = 1
    meta = {"group_id": np.arange(n) + group_offset}
    info = {"view": "step", "prompt_length": P, "response_length": A, "pad_token_id": 9}
    tensors = {"input_ids": ids, "attention_mask": attn, "response_mask": rmask}
    return Batch(tensors, meta, info)


def test_merge_relays_step_rows_to_the_common_prompt_and_response_columns():
    a = _step_part([[1, 2]], [[3]], 0)  # P=2, A=1
    b = _step_part([[4, 5, 6]], [[7, 8]], 1)  # P=3, A=2
    m = merge_batches([a, b])
    assert (m.info["prompt_length"], m.info["response_length"]) == (3, 2)
    # Prompts end at column P=3 (left pad), responses start there (right pad).
    assert m.tensors["input_ids"].tolist() == [[9, 1, 2, 3, 9], [4, 5, 6, 7, 8]]
    assert m.tensors["attention_mask"].tolist() == [[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert m.tensors["response_mask"].tolist() == [[1, 0], [1, 1]]
    assert m.meta["group_id"].tolist() == [0, 1]


def test_merge_pads_scored_choices_to_the_common_candidates():
    # Score mode: worker a saw 1 candidate of 2 tokens, worker b 2 candidates of up to 3.
    a, b = _step_part([[1, 2]], [[3]], 0), _step_part([[4]], [[5]], 1)
    a.info["scored_choices"] = b.info["scored_choices"] = True  # as build_step_batch declares
    a.tensors.update(
        cand_ids=torch.tensor([[[3, 0]]]),
        cand_mask=torch.tensor([[[1, 1]]]),
        cand_norm=torch.tensor([[2.0]]),
        chosen=torch.tensor([0]),
    )
    b.tensors.update(
        cand_ids=torch.tensor([[[5, 6, 0], [7, 0, 9]]]),
        cand_mask=torch.tensor([[[1, 1, 1], [1, 1, 0]]]),
        cand_norm=torch.tensor([[3.0, 2.0]]),
        chosen=torch.tensor([1]),
    )
    m = merge_batches([a, b])
    assert m.tensors["cand_ids"].tolist() == [[[3, 0, 9], [9, 9, 9]], [[5, 6, 0], [7, 0, 9]]]
    assert m.tensors["cand_mask"].tolist() == [[[1, 1, 0], [0, 0, 0]], [[1, 1, 1], [1, 1, 0]]]
    assert m.tensors["cand_norm"].tolist() == [[2.0, 1.0], [3.0, 2.0]]  # empty slot: 1
    assert m.tensors["chosen"].tolist() == [0, 1]
