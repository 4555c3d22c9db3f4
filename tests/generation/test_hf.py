"""HFBackend on a real tiny model: padding invariance, scoring parity, seeds, stops."""

import pytest
import torch

from arborl.generation import BACKENDS, HFBackend, SamplingParams, make_backend, sample_next
from arborl.generation.hf import refuse_banned_first_tokens
from arborl.models import load_policy, token_logprobs


@pytest.fixture(scope="module")
def policy():
    model, tok = load_policy("tiny-0.1m", seed=0)
    model.eval()
    return model, tok


@pytest.fixture()
def backend(policy):
    return HFBackend(*policy, max_batch_size=8)


def _prompts(tok):
    texts = ["<|user|>go north<|end|><|assistant|>", "hi", "a longer prompt that pads the others"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_alone_equals_inside_left_padded_batch(policy, backend):
    _, tok = policy
    prompts = _prompts(tok)
    params = SamplingParams(max_new_tokens=12, temperature=0)
    batch = backend.generate(prompts, params)
    for prompt, in_batch in zip(prompts, batch):
        alone = backend.generate([prompt], params)[0]
        assert alone.token_ids == in_batch.token_ids
        torch.testing.assert_close(
            torch.tensor(alone.logprobs), torch.tensor(in_batch.logprobs), atol=1e-4, rtol=0
        )


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.3])
def test_rollout_logprobs_equal_training_scores(policy, backend, temperature):
    model, tok = policy
    prompts = _prompts(tok)
    params = SamplingParams(max_new_tokens=10, temperature=temperature, top_k=30, seed=5)
    outs = backend.generate(prompts, params)
    # score all rows together, left padded, as training does
    seqs = [p + o.token_ids for p, o in zip(prompts, outs)]
    width = max(map(len, seqs))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    scores = token_logprobs(model, ids, mask, temperature=temperature)
    for r, out in enumerate(outs):
        n = len(out.token_ids)
        torch.testing.assert_close(scores[r, -n:], torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_same_seed_same_output_and_different_seed_differs(policy, backend):
    _, tok = policy
    prompts = _prompts(tok) * 3
    p1 = SamplingParams(max_new_tokens=16, temperature=1.0, top_p=0.9, seed=11)
    a = [c.token_ids for c in backend.generate(prompts, p1)]
    # a different max_batch_size (so different batches) gives the same samples
    b = [c.token_ids for c in HFBackend(*policy, max_batch_size=2).generate(prompts, p1)]
    c = [c.token_ids for c in backend.generate(prompts, SamplingParams(16, 1.0, 0.9, seed=12))]
    assert a == b
    assert a != c
    # a prompt sampled alone matches its row inside the batch (same seed, same position)
    assert backend.generate(prompts[:1], p1)[0].token_ids == a[0]
    # without a seed, the backend's own generator advances between calls
    unseeded = SamplingParams(max_new_tokens=16, temperature=1.0)
    assert backend.generate(prompts, unseeded) != backend.generate(prompts, unseeded)


def test_stop_strings_eos_and_length(policy, backend):
    model, tok = policy
    prompt = tok.encode("hello", add_special_tokens=False)
    for seed in range(4):
        params = SamplingParams(max_new_tokens=40, seed=seed)
        free = backend.generate([prompt], params)[0]
        for stop in (tok.decode(free.token_ids[2:3]), tok.decode(free.token_ids[3:6])):
            params.stop = [stop]
            got = backend.generate([prompt], params)[0]
            # expected: the free-running tokens up to the first one completing `stop`
            end = next(j for j in range(40) if stop in tok.decode(free.token_ids[: j + 1]))
            assert got.token_ids == free.token_ids[: end + 1]
            assert got.finish_reason == "stop" and stop in got.text
    # length
    out = backend.generate([prompt], SamplingParams(max_new_tokens=3, temperature=0))[0]
    assert len(out.token_ids) == 3 and out.finish_reason == "length"
    # EOS: declare the first sampled token the EOS id; the row ends right after it
    with_eos = HFBackend(model, tok)
    with_eos.eos_token_ids = [free.token_ids[0]]
    out = with_eos.generate([prompt], SamplingParams(max_new_tokens=40, seed=3))[0]
    assert out.token_ids == free.token_ids[:1] and out.finish_reason == "stop"


@pytest.mark.parametrize("stop", ["🌲🌲🌲", "🌲🌲🌲🌲🌲"])
def test_a_stop_string_split_into_byte_tokens_is_seen(bpe_policy, stop):
    """GPT-2 spells each 🌲 as 3 tokens, so `🌲🌲🌲` is 9 tokens: the stop check decoded
    the last len(stop) + 4 = 7 tokens, and missed it (`'\ufffd🌲🌲'`)."""
    model, tok = bpe_policy
    backend = HFBackend(model, tok)
    ids = tok.encode(f"go {stop}", add_special_tokens=False)
    assert len(ids) - 1 >= 3 * len(stop) > len(stop) + 4
    assert backend._hit_stop(ids, [stop]) and backend._hit_stop(ids, ["x", stop])
    assert not backend._hit_stop(ids[:-1], [stop])  # the last byte-token completes it


def test_early_finishers_pruned_rest_unchanged(policy):
    _, tok = policy
    prompts = _prompts(tok) * 4
    greedy = SamplingParams(max_new_tokens=20, temperature=0)
    full = HFBackend(*policy).generate(prompts, greedy)
    # make row 0's 2nd token an EOS: it stops at 2 tokens, all others are unchanged
    backend = HFBackend(*policy)
    backend.eos_token_ids = [full[0].token_ids[1]]
    outs = backend.generate(prompts, greedy)
    for f, o in zip(full, outs):
        if backend.eos_token_ids[0] in f.token_ids:
            cut = f.token_ids.index(backend.eos_token_ids[0]) + 1
            assert o.token_ids == f.token_ids[:cut]
        else:
            assert o.token_ids == f.token_ids


def test_sample_next_top_k_top_p():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]]).repeat(200, 1)
    u = torch.rand(200, generator=torch.Generator().manual_seed(0))
    ids, lp = sample_next(logits, SamplingParams(temperature=1.0, top_k=2), u)
    assert set(ids.tolist()) == {0, 1}
    # logprob is of the untruncated distribution
    torch.testing.assert_close(lp, torch.log_softmax(logits[0], -1)[ids])
    ids, _ = sample_next(logits, SamplingParams(temperature=1.0, top_p=0.5), u)
    assert set(ids.tolist()) == {0}  # p(0) = 0.64 >= 0.5
    ids, _ = sample_next(logits, SamplingParams(temperature=1.0, top_p=0.7), u)
    assert set(ids.tolist()) == {0, 1}  # 0.64 < 0.7 <= 0.64 + 0.24
    # inverse CDF by hand: probs (0.64, 0.24, 0.09, 0.03); u = 0.7 lands on id 1, u = 0 on 0
    ids, _ = sample_next(logits[:2], SamplingParams(temperature=1.0), torch.tensor([0.7, 0.0]))
    assert ids.tolist() == [1, 0]
    # a zero-probability id is never chosen, even at u = 0
    masked = torch.tensor([[-float("inf"), 0.0, 0.0]])
    ids, _ = sample_next(masked, SamplingParams(temperature=1.0), torch.tensor([0.0]))
    assert ids.tolist() == [1]


def test_bad_params_and_prompts(backend):
    with pytest.raises(ValueError, match="max_new_tokens"):
        backend.generate([[5]], SamplingParams(max_new_tokens=0))
    with pytest.raises(ValueError, match="top_p"):
        backend.generate([[5]], SamplingParams(top_p=0))
    with pytest.raises(ValueError, match="prompts\\[0\\] is empty"):
        backend.generate([[]], SamplingParams())
    with pytest.raises(ValueError, match="1024"):
        backend.generate([[5] * 1024], SamplingParams())


def test_make_backend_registry():
    assert set(BACKENDS) == {"hf", "openai", "vllm"}
    backend, tok = make_backend("tiny-0.1m")
    assert isinstance(backend, HFBackend) and tok.eos_token == "<|end|>"
    with pytest.raises(ValueError, match="known"):
        make_backend("tiny-0.1m", kind="nope")
    with pytest.raises(ValueError, match="tokenizer="):
        make_backend("http://127.0.0.1:1/v1")


def test_qwen2_preset_logprobs_match_scoring():
    model, tok = load_policy("qwen-tiny-1m")
    model.eval()
    prompts = [tok.encode("hello world", add_special_tokens=False), [5, 20]]
    outs = HFBackend(model, tok).generate(prompts, SamplingParams(8, temperature=0.8, seed=0))
    ids = torch.tensor([prompts[0] + outs[0].token_ids])
    scores = token_logprobs(model, ids, temperature=0.8)[0, len(prompts[0]) - 1 :]
    torch.testing.assert_close(scores, torch.tensor(outs[0].logprobs), atol=1e-4, rtol=0)


def _prefill_spy(model):
    """(rows, forward): a wrapper of `model.forward` that appends the batch size of every
    prefill (a forward of more than one position) to `rows`."""
    rows: list[int] = []
    forward = model.forward

    def spy(*args, **kwargs):
        if kwargs["input_ids"].shape[1] > 1:
            rows.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    return rows, spy


def test_shared_prompts_prefilled_once_match_unshared(policy, monkeypatch):
    """GRPO groups repeat prompts: each distinct prompt is prefilled once and its cache
    copied to its rows; tokens and logprobs are those of prefilling every row."""
    model, tok = policy
    backend = HFBackend(model, tok)  # one batch for all 9 rows
    prompts = [p for p in _prompts(tok) for _ in range(3)]
    prefill_rows, spy = _prefill_spy(model)
    greedy = SamplingParams(max_new_tokens=12, temperature=0)
    monkeypatch.setattr(model, "forward", spy)
    shared = backend.generate(prompts, greedy)
    monkeypatch.undo()
    assert prefill_rows == [3]  # 9 rows, 3 distinct prompts
    for prompt, out in zip(prompts, shared):
        alone = backend.generate([prompt], greedy)[0]  # one row: nothing shared
        assert out.token_ids == alone.token_ids
        torch.testing.assert_close(
            torch.tensor(out.logprobs), torch.tensor(alone.logprobs), atol=1e-4, rtol=0
        )
    # Sampled rows of one group differ (own random streams) and score as training does.
    sampled = backend.generate(prompts, SamplingParams(max_new_tokens=10, temperature=1.0, seed=3))
    assert len({tuple(c.token_ids) for c in sampled[:3]}) > 1
    for prompt, out in zip(prompts, sampled):
        ids = torch.tensor([prompt + out.token_ids])
        scores = token_logprobs(model, ids, temperature=1.0)[0, len(prompt) - 1 :]
        torch.testing.assert_close(scores, torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_banned_first_tokens_bar_only_the_first_token(policy, backend):
    _, tok = policy
    prompt = _prompts(tok)[0]
    free = backend.generate([prompt] * 16, SamplingParams(max_new_tokens=3, seed=5))
    banned = sorted({c.token_ids[0] for c in free[:8]})
    params = SamplingParams(max_new_tokens=3, seed=5, banned_first_tokens=banned)
    out = backend.generate([prompt] * 16, params)
    assert all(c.token_ids[0] not in banned for c in out)
    # logprobs stay those of the full distribution: the first token's is unchanged by the ban
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    chosen, logp = sample_next(logits, SamplingParams(), torch.tensor([0.0]), banned=[0])
    assert chosen.item() == 1
    assert logp.item() == pytest.approx(torch.log_softmax(logits, -1)[0, 1].item())
    greedy, _ = sample_next(logits, SamplingParams(temperature=0), banned=[0, 1])
    assert greedy.item() == 2
    with pytest.raises(ValueError, match="all 4 token ids are banned"):
        sample_next(logits, SamplingParams(), torch.tensor([0.5]), banned=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="banned_first_tokens"):
        backend.generate([prompt], SamplingParams(banned_first_tokens=[-1]))
    with pytest.raises(ValueError, match="not supported by the vLLM backend"):
        refuse_banned_first_tokens(SamplingParams(banned_first_tokens=[1]), "vLLM")


def test_prompt_encodings_are_remembered_until_the_weights_change(monkeypatch):
    """A second call with prompts seen before prefills nothing and gives what a fresh
    backend gives; after an in-place weight update (an optimizer step) the prompts are
    encoded again, with the new weights."""
    model, tok = load_policy("tiny-0.1m", seed=0)
    model.eval()
    backend = HFBackend(model, tok)
    prompts = _prompts(tok)
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    prefill_rows, spy = _prefill_spy(model)
    monkeypatch.setattr(model, "forward", spy)
    first = backend.generate(prompts, greedy)
    again = backend.generate(prompts[:2] + prompts, greedy)
    assert prefill_rows == [3]  # the second call encoded nothing
    for a, b in zip(first, again[2:]):
        # Same tokens; logprobs to float rounding: a 5-row decode step can round otherwise
        # than a 3-row one (2e-7 apart on an AMD EPYC, equal on the Xeon).
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )
    fresh = HFBackend(model, tok).generate(prompts, greedy)
    assert prefill_rows == [3, 3]
    for a, b in zip(first, fresh):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # in place, as an optimizer step writes
    changed = backend.generate(prompts, greedy)
    assert prefill_rows == [3, 3, 3]
    expected = HFBackend(model, tok).generate(prompts, greedy)
    for a, b in zip(changed, expected):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )
    assert any(a.logprobs != c.logprobs for a, c in zip(first, changed))


def test_prompts_are_encoded_in_length_ordered_chunks(monkeypatch):
    """Distinct prompts are encoded shortest first, in forwards of at most
    ENCODE_CHUNK_TOKENS padded tokens, so short prompts are not padded to the longest;
    the completions are those of encoding them all in one forward."""
    import arborl.generation.hf as hf

    model, tok = load_policy("tiny-0.1m", seed=0)
    model.eval()
    prompts = [tok.encode("x" * n, add_special_tokens=False) for n in (40, 3, 9, 41, 4, 38)]
    greedy = SamplingParams(max_new_tokens=5, temperature=0)
    whole = HFBackend(model, tok).generate(prompts, greedy)
    shapes = []
    forward = model.forward

    def spy(*args, **kwargs):
        if kwargs["input_ids"].shape[1] > 1:
            shapes.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    monkeypatch.setattr(hf, "ENCODE_CHUNK_TOKENS", 3 * 41)
    chunked = HFBackend(model, tok).generate(prompts, greedy)
    assert shapes == [(3, 9), (3, 41)]  # 3, 4, 9 tokens; then 38, 40, 41
    for a, b in zip(whole, chunked):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )
