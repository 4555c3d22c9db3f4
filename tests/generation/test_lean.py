"""LeanDecoder: the same tokens and logprobs as the HF forward, or the HF forward itself."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from arborl.generation import HFBackend, SamplingParams
from arborl.generation.lean import LeanDecoder
from arborl.models import load_policy, token_logprobs


@pytest.fixture(scope="module")
def tok():
    return load_policy("tiny-0.1m", seed=0)[1]


def _from_config(config, seed: int = 0):
    torch.manual_seed(seed)
    config._attn_implementation = "sdpa"
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def _real_configs(vocab: int) -> dict:
    """Small models built from real HF configs: GQA, MQA, biases, an explicit head_dim,
    untied heads and llama3 RoPE scaling."""
    common = dict(vocab_size=vocab, max_position_embeddings=256, pad_token_id=0)
    return {
        "qwen2-gqa": Qwen2Config(
            hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, **common,
        ),
        "llama-mqa-biases": LlamaConfig(
            hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
            num_key_value_heads=1, attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
            **common,
        ),
        "llama3-rope-head-dim": LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, head_dim=24,
            rope_parameters={
                "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            **common,
        ),
    }  # fmt: skip


def _model(tok, name: str):
    """A preset by name, or one of `_real_configs`, randomly initialised."""
    if name in ("tiny-1m", "qwen-tiny-1m"):
        return load_policy(name, seed=0)[0].eval()
    return _from_config(_real_configs(len(tok))[name])


def _prompts(tok):
    texts = ["<|user|>go north<|end|><|assistant|>", "hi", "a longer prompt that pads the others"]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    return [p for p in ids for _ in range(2)]  # repeated prompts, as GRPO groups


@pytest.mark.parametrize("name", ["tiny-1m", "qwen-tiny-1m", *_real_configs(8)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_lean_decode_equals_the_hf_forward(tok, name, temperature):
    """Left-padded prompts of three lengths, each twice: the lean step samples the same
    tokens as the HF forward, with logprobs equal to float rounding and to training's."""
    model = _model(tok, name)
    lean, hf = HFBackend(model, tok), HFBackend(model, tok, lean_decode=False)
    assert lean._lean is not None and hf._lean is None
    prompts = _prompts(tok)
    params = SamplingParams(max_new_tokens=20, temperature=temperature, seed=7)
    for a, b in zip(lean.generate(prompts, params), hf.generate(prompts, params)):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )
    out = lean.generate(prompts[:1], params)[0]
    ids = torch.tensor([prompts[0] + out.token_ids])
    scores = token_logprobs(model, ids, temperature=temperature)[0, len(prompts[0]) - 1 :]
    torch.testing.assert_close(scores, torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_lean_weights_follow_in_place_updates(tok):
    """The concatenated q/k/v and gate/up weights are rebuilt after an optimizer-style
    in-place write, so the lean step decodes with the new weights."""
    model = load_policy("tiny-0.1m", seed=0)[0].eval()
    lean = HFBackend(model, tok)
    prompts = _prompts(tok)
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    before = lean.generate(prompts, greedy)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    after = lean.generate(prompts, greedy)
    expected = HFBackend(model, tok, lean_decode=False).generate(prompts, greedy)
    for a, b in zip(after, expected):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )
    assert any(a.logprobs != b.logprobs for a, b in zip(before, after))


def test_unsupported_models_decode_through_the_hf_forward(tok):
    """Configurations the lean step does not reproduce keep the HF forward."""
    cfg = _real_configs(len(tok))["qwen2-gqa"]
    eager = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    sliding = Qwen2Config(**{**cfg.to_dict(), "use_sliding_window": True, "sliding_window": 8})
    dynamic = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        vocab_size=len(tok), rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                              "rope_theta": 10000.0},
    )  # fmt: skip
    for model in (eager, _from_config(sliding), _from_config(dynamic)):
        assert not LeanDecoder.supports(model)
        assert HFBackend(model, tok)._lean is None
    with pytest.raises(ValueError, match="attention implementation 'eager'"):
        LeanDecoder(eager)


def test_lean_decode_in_bf16_equals_the_hf_forward(tok):
    """A bf16 model: rotary tables in the hidden states' dtype, the same greedy tokens and
    logprobs as the HF forward."""
    model = load_policy("tiny-1m", seed=0)[0].to(torch.bfloat16).eval()
    lean, hf = HFBackend(model, tok), HFBackend(model, tok, lean_decode=False)
    assert lean._lean is not None
    assert lean._lean.rotary(8)[0].dtype == torch.bfloat16
    greedy = SamplingParams(max_new_tokens=20, temperature=0)
    for a, b in zip(lean.generate(_prompts(tok), greedy), hf.generate(_prompts(tok), greedy)):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )
