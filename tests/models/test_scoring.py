"""response_logits: the LM head on response positions only, and shared prompts encoded once,
give the logits (and gradients) of one full forward pass over every row."""

import pytest
import torch

from arborl.models import load_policy
from arborl.models.scoring import distinct_rows, position_ids_from_mask, response_logits


def _rows(pad_id):
    """Step-view rows (P=4, A=3): prompts left-padded, responses right-padded; rows 0, 1, 3
    share a prompt and row 2 has its own, shorter one."""
    prompts = [[5, 6, 7, 8], [5, 6, 7, 8], [9, 10], [5, 6, 7, 8]]
    responses = [[11, 12, 13], [14, 15], [16, 17, 18], [19]]
    ids = torch.full((4, 7), pad_id, dtype=torch.long)
    mask = torch.zeros((4, 7), dtype=torch.long)
    for r, (p, a) in enumerate(zip(prompts, responses)):
        ids[r, 4 - len(p) : 4 + len(a)] = torch.tensor(p + a)
        mask[r, 4 - len(p) : 4 + len(a)] = 1
    return ids, mask


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-0.1m", seed=0)


def test_distinct_rows():
    ids = torch.tensor([[1, 2], [3, 4], [1, 2], [1, 2]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [0, 1]])  # row 3: same ids, other mask
    first, inverse = distinct_rows(ids, mask)
    assert len(first) == 3
    assert torch.equal(ids[first][inverse], ids) and torch.equal(mask[first][inverse], mask)
    assert inverse[0] == inverse[2] and len({int(inverse[i]) for i in (0, 1, 3)}) == 3


def _full_logits(model, ids, mask, p, a):
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask))
    return out.logits[:, p - 1 : p - 1 + a]  # (B, A, V): position p-1 predicts token p


@pytest.mark.parametrize("share", [True, False])
def test_response_logits_equal_the_full_forward_with_gradients(policy, share):
    model, tok = policy
    model.train()
    ids, mask = _rows(tok.pad_token_id)
    resp = mask[:, 4:].float()  # (B, A): only real response positions count
    weights = torch.randn(4, 3, model.config.vocab_size, generator=torch.Generator().manual_seed(0))

    def loss_and_grads(logits):
        model.zero_grad()
        loss = (logits * weights * resp[..., None]).sum()
        loss.backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    ref, ref_grads = loss_and_grads(_full_logits(model, ids, mask, 4, 3))
    got, got_grads = loss_and_grads(response_logits(model, ids, mask, 4, 3, share_prompts=share))
    assert got.shape == ref.shape == (4, 3, model.config.vocab_size)
    torch.testing.assert_close(got * resp[..., None], ref * resp[..., None], atol=1e-5, rtol=1e-5)
    for g, r in zip(got_grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)


def test_response_logits_with_activation_checkpointing_skip_the_cache(policy):
    model, tok = load_policy("tiny-0.1m", seed=0)
    model.activation_checkpointing_enable()  # transformers turns the KV cache off under it
    model.train()
    ids, mask = _rows(tok.pad_token_id)
    resp = mask[:, 4:, None].float()
    with torch.no_grad():
        ref = _full_logits(model, ids, mask, 4, 3)
        got = response_logits(model, ids, mask, 4, 3)
    torch.testing.assert_close(got * resp, ref * resp, atol=1e-5, rtol=1e-5)


def test_response_logits_one_token_and_empty_responses(policy):
    model, tok = policy
    model.eval()
    ids, mask = _rows(tok.pad_token_id)
    with torch.no_grad():
        ref = _full_logits(model, ids, mask, 4, 1)
        torch.testing.assert_close(response_logits(model, ids[:, :5], mask[:, :5], 4, 1), ref)
        assert response_logits(model, ids[:, :4], mask[:, :4], 4, 0).shape[:2] == (4, 0)


@pytest.mark.parametrize("max_tokens", [512, 8])
def test_packed_prompts_equal_the_full_forward_with_gradients(policy, monkeypatch, max_tokens):
    """Many rows over few prompts (a GRPO step): each prompt is encoded once, its rows'
    responses packed behind it; at max_tokens=8 a prompt's rows spill into several pieces
    (the prompt repeated) and pieces share sequences. Logits and gradients are those of
    one full pass over every row."""
    import arborl.models.scoring as scoring

    monkeypatch.setattr(scoring, "MAX_PACKED_TOKENS", max_tokens)
    model, tok = policy
    model.train()
    gen = torch.Generator().manual_seed(1)
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    ids = torch.full((12, 8), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((12, 8), dtype=torch.long)
    for r in range(12):
        p = prompts[r % 3]
        a = torch.randint(20, 40, (1 + r % 4,), generator=gen).tolist()  # 1-4 tokens
        ids[r, 4 - len(p) : 4 + len(a)] = torch.tensor(p + a)
        mask[r, 4 - len(p) : 4 + len(a)] = 1
    first, inverse = distinct_rows(ids[:, :4], mask[:, :4])
    assert len(first) == 3
    resp = mask[:, 4:].float()
    weights = torch.randn(12, 4, model.config.vocab_size, generator=gen)

    def loss_and_grads(logits):
        model.zero_grad()
        (logits * weights * resp[..., None]).sum().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    ref, ref_grads = loss_and_grads(_full_logits(model, ids, mask, 4, 4))
    packed = scoring.packed_response_logits(model, ids[:, :7], mask[:, :7], 4, 4, first, inverse)
    got, got_grads = loss_and_grads(packed)
    torch.testing.assert_close(got * resp[..., None], ref * resp[..., None], atol=1e-5, rtol=1e-5)
    for g, r in zip(got_grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    # response_logits takes this path for such a batch (9 of 12 rows repeat a prompt)
    torch.testing.assert_close(
        response_logits(model, ids, mask, 4, 4) * resp[..., None], got * resp[..., None]
    )
