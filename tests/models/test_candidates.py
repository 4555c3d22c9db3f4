"""The categorical over candidate actions (`arborl.models.candidates`) equals a brute-force
forward pass per (prompt, candidate), in value and gradient.

The batched path encodes each prompt once into a KV cache and runs every candidate of every
prompt on top of it (without a cache, as under activation checkpointing: `response_logits`
behind each prompt); the brute force runs one unpadded sequence per candidate. Char and BPE tokenizers, fp32 and bf16
autocast, candidates of different token lengths and sharing prefixes, prompts with fewer
candidates than the widest (empty slots), every normalisation and two temperatures.
"""

import pytest
import torch

import arborl.models.candidates as candidates
from arborl.models import load_policy
from arborl.models.candidates import (
    candidate_token_logp,
    choice_entropy,
    choice_logp,
    norm_divisor,
    sample_choice,
)
from arborl.models.scoring import autocast_ctx

PROMPTS = ["#..A\n.#.G\n", "you are in a room. a door is north and a key is here.\n", "go?"]
CANDIDATES = [
    ["go", "go north", "go north east", "take key"],  # shared prefixes, 1 to 3 words
    ["open door", "north", "take the small key now"],
    ["up", "u"],  # a one-token (char) candidate beside a longer one
]
PROMPTS.append(PROMPTS[0])  # a row repeated (a GRPO group's episodes in one state): it is
CANDIDATES.append(CANDIDATES[0])  # scored once and its gradient sums over both rows


@pytest.fixture(scope="module", params=["tiny-0.1m", "bpe-tiny-0.1m"])
def policy(request):
    model, tok = load_policy(request.param, seed=0)
    model.eval()
    return model, tok


def _encode(tok, text):
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _layout(tok):
    """Left-padded (B, P) prompts, right-padded (B, K, L) candidates (each its text's tokens
    and the eos), and the per-candidate (token count, word count)."""
    prompts = [_encode(tok, p) for p in PROMPTS]
    cands = [[_encode(tok, c) + [tok.eos_token_id] for c in row] for row in CANDIDATES]
    b, k = len(prompts), max(map(len, cands))
    p, length = max(map(len, prompts)), max(len(c) for row in cands for c in row)
    ids = torch.full((b, p), tok.pad_token_id)
    mask = torch.zeros((b, p), dtype=torch.long)
    cand_ids = torch.full((b, k, length), tok.pad_token_id)
    cand_mask = torch.zeros((b, k, length), dtype=torch.long)
    for r, (prompt, row) in enumerate(zip(prompts, cands)):
        ids[r, p - len(prompt) :], mask[r, p - len(prompt) :] = torch.tensor(prompt), 1
        for j, c in enumerate(row):
            cand_ids[r, j, : len(c)], cand_mask[r, j, : len(c)] = torch.tensor(c), 1
    counts = [[(len(c), len(text.split())) for c, text in zip(row, texts)]
              for row, texts in zip(cands, CANDIDATES)]  # fmt: skip
    return prompts, cands, counts, (ids, mask, cand_ids, cand_mask)


def _norms(counts, norm, k):
    out = torch.ones(len(counts), k)
    for r, row in enumerate(counts):
        out[r, : len(row)] = torch.tensor([norm_divisor(norm, t, w) for t, w in row])
    return out


def _candidate_logp(model, prompt, cand):
    """Summed log-probability of `cand` after `prompt`: one unpadded full forward."""
    seq = torch.tensor([prompt + cand])  # (1, T)
    logits = model(input_ids=seq).logits[0, len(prompt) - 1 : -1]  # (len(cand), V)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return logits.log_softmax(-1).gather(-1, torch.tensor(cand)[:, None]).sum()


def _brute_force(model, prompts, cands, norms, temperature):
    """Per prompt: one forward per candidate, then the categorical."""
    out = []
    for r, (prompt, row) in enumerate(zip(prompts, cands)):
        scores = []
        for j, c in enumerate(row):
            scores.append(_candidate_logp(model, prompt, c) / norms[r, j])
        scores = torch.stack(scores)
        out.append(torch.log_softmax(scores / temperature, -1))
    return out  # list of (K_r,)


def _batched(model, tensors, norms, temperature):
    ids, mask, cand_ids, cand_mask = tensors
    token_logp = candidate_token_logp(model, ids, mask, cand_ids, cand_mask)
    valid = cand_mask.bool().any(-1)
    return choice_logp(token_logp, norms, valid, temperature), valid


@pytest.mark.parametrize("path", ["kv_cache", "no_cache"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("norm,temperature", [("sum", 1.0), ("token", 0.7), ("word", 1.0)])
def test_the_categorical_equals_a_forward_per_candidate(
    policy, path, dtype, norm, temperature, monkeypatch
):
    model, tok = policy
    if path == "no_cache":  # as under activation checkpointing: `response_logits` runs
        monkeypatch.setattr(candidates, "checkpointing", lambda m: True)
    prompts, cands, counts, tensors = _layout(tok)
    norms = _norms(counts, norm, tensors[2].shape[1])
    with torch.no_grad(), autocast_ctx(dtype):
        got, valid = _batched(model, tensors, norms, temperature)
        want = _brute_force(model, prompts, cands, norms, temperature)
    tol = 1e-5 if dtype == "float32" else 3e-2  # bf16: each path rounds its own matmuls
    for r, w in enumerate(want):
        k = len(cands[r])
        torch.testing.assert_close(got[r, :k], w.float(), atol=tol, rtol=tol)
        assert valid[r].tolist() == [True] * k + [False] * (valid.shape[1] - k)
        assert torch.isneginf(got[r, k:]).all()  # empty slots carry no probability
    # The scores really differ between candidates (not a uniform categorical).
    assert got[0].exp()[:4].std() > 1e-3


def test_the_gradient_equals_the_brute_force_gradient_and_finite_differences(policy):
    model, tok = policy
    # float64 weights for the finite differences (Llama's RMSNorm still computes in
    # float32, so both paths agree to ~1e-7, not 1e-15).
    model = model.double()
    try:
        prompts, cands, counts, tensors = _layout(tok)
        norms = _norms(counts, "token", tensors[2].shape[1]).double()
        chosen = torch.tensor([2, 0, 1, 3])
        weights = torch.tensor([1.0, -0.5, 2.0, 0.7], dtype=torch.float64)  # an advantage per row

        def batched_loss():
            logp, valid = _batched(model, tensors, norms, 0.8)
            picked = logp.gather(-1, chosen[:, None]).squeeze(-1)
            return (weights * picked).sum() - 0.1 * choice_entropy(logp, valid).sum()

        def brute_loss():
            out = 0.0
            for r, lp in enumerate(_brute_force(model, prompts, cands, norms, 0.8)):
                ent = -(lp.exp() * lp).sum()
                out = out + weights[r] * lp[chosen[r]] - 0.1 * ent
            return out

        params = list(model.parameters())
        got = torch.autograd.grad(batched_loss(), params)
        want = torch.autograd.grad(brute_loss(), params)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-4)
        # A directional finite difference along a random direction of every parameter.
        gen = torch.Generator().manual_seed(0)
        direction = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
        analytic = sum((g * d).sum() for g, d in zip(got, direction))
        eps = 1e-4  # measured: 1e-2 and 1e-3 are off by truncation, 1e-5 by rounding
        with torch.no_grad():
            for p, d in zip(params, direction):
                p.add_(eps * d)
            up = batched_loss()
            for p, d in zip(params, direction):
                p.sub_(2 * eps * d)
            down = batched_loss()
            for p, d in zip(params, direction):
                p.add_(eps * d)
        torch.testing.assert_close((up - down) / (2 * eps), analytic, atol=1e-4, rtol=1e-3)
    finally:
        model.float()


def test_entropy_and_sampling_by_hand():
    # Two valid slots with probabilities 0.25 / 0.75 and an empty third slot:
    # entropy = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.5623351...
    logp = torch.log(torch.tensor([[0.25, 0.75, 0.0]]))
    valid = torch.tensor([[True, True, False]])
    torch.testing.assert_close(choice_entropy(logp, valid), torch.tensor([0.5623351]))
    # Inverse CDF: u below the first slot's mass picks slot 0, above it slot 1, never the
    # empty slot. The mass is ln/exp of 0.25 in float32, whose last bit differs between
    # CPUs' vector maths, so the uniforms sit well away from it.
    for u, want in [(0.0, 0), (0.2, 0), (0.3, 1), (0.9999, 1)]:
        assert sample_choice(logp, torch.tensor([u]), greedy=False).item() == want
    # On the boundary itself the upper slot wins. Built so every step is exact in IEEE-754
    # on any machine: exp(0) = 1, so the CDF is (1, 2, 2) and u = 0.5 targets exactly 1.0.
    even = torch.tensor([[0.0, 0.0, float("-inf")]])
    for u, want in [(0.0, 0), (0.5, 1), (0.9999, 1)]:
        assert sample_choice(even, torch.tensor([u]), greedy=False).item() == want
    assert sample_choice(logp, torch.tensor([0.0]), greedy=True).item() == 1
    # Temperature 2 on scores (0, ln 3): softmax of (0, ln 3 / 2) = (1, sqrt 3) / (1 + sqrt 3).
    scores = torch.tensor([[[0.0], [torch.log(torch.tensor(3.0))]]])  # (1, 2, 1)
    got = choice_logp(scores, torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool), 2.0).exp()
    s3 = 3**0.5
    torch.testing.assert_close(got, torch.tensor([[1 / (1 + s3), s3 / (1 + s3)]]))


def test_norm_divisors():
    assert [norm_divisor(n, 5, 2) for n in ("sum", "token", "word")] == [1.0, 5.0, 2.0]
    assert norm_divisor("word", 3, 0) == 1.0  # an action of whitespace only: no division by 0
    with pytest.raises(ValueError, match="'words' is not one of"):
        norm_divisor("words", 1, 1)
