"""Presets, load/save, dtype, LoRA and the critic, on real tiny models."""

import pytest
import torch

from arborl.models import (
    MODEL_PRESETS,
    ValueModel,
    apply_lora,
    autocast_ctx,
    load_policy,
    load_tokenizer,
    save_policy,
    token_logprobs,
)


def test_presets_sizes():
    expected = {"tiny-0.1m": 0.130, "tiny-1m": 0.998, "qwen-tiny-1m": 0.999}
    for name, millions in expected.items():
        model, tok = load_policy(name)
        n = sum(p.numel() for p in model.parameters()) / 1e6
        assert abs(n - millions) < 0.002, (name, n)
        assert model.config.vocab_size == len(tok)
        assert model.config.max_position_embeddings == 1024
    assert MODEL_PRESETS["qwen-tiny-1m"].model_type == "qwen2"
    assert MODEL_PRESETS["tiny-20m"].hidden_size == 512


@pytest.mark.parametrize(("name", "millions"), [("bpe-tiny-0.1m", 3.340), ("bpe-tiny-1m", 7.417)])
def test_bpe_presets_are_the_char_bodies_over_gpt2_bpe(name, millions):
    model, tok = load_policy(name)
    char, _ = load_policy(name.removeprefix("bpe-"))
    n, body = (sum(p.numel() for p in m.parameters()) for m in (model, char))
    hidden = model.config.hidden_size
    assert len(tok) == model.config.vocab_size == 50259 and abs(n / 1e6 - millions) < 0.002
    # the same attention/MLP sizes: only the (tied) embedding differs
    assert n - 50259 * hidden == body - char.config.vocab_size * hidden
    assert (tok.eos_token, tok.pad_token, tok.padding_side) == (
        "<|im_end|>",
        "<|endoftext|>",
        "left",
    )
    assert model.generation_config.eos_token_id == tok.eos_token_id == 50258
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)  # fmt: skip
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.encode(" Numbers: 1 2", add_special_tokens=False) == [27797, 25, 352, 362]
    critic = ValueModel.from_policy_spec(name)  # PPO's critic is built on the same vocabulary
    assert critic.config.vocab_size == 50259 and critic.config.hidden_size == hidden


def test_bpe_preset_weights_depend_only_on_the_seed_and_extra_tokens_are_added():
    a, tok = load_policy("bpe-tiny-0.1m", seed=1)
    b, _ = load_policy("bpe-tiny-0.1m", seed=1)
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    _, extra = load_policy("bpe-tiny-0.1m", extra_tokens=("<think>", "<think>"))
    assert len(extra) == len(tok) + 1 and extra.encode("<think>ok") == [50259, 482]


def test_unknown_tokenizer_kind_names_the_field_and_the_kinds():
    from arborl.models import ModelPreset

    with pytest.raises(ValueError, match=r"ModelPreset\.tokenizer='spm'.*char, env-bpe, gpt2-bpe"):
        ModelPreset("llama", 64, 2, 4, 2, 256, tokenizer="spm")


def test_seeded_init_is_deterministic_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, _ = load_policy("tiny-0.1m", seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    b, _ = load_policy("tiny-0.1m", seed=1)
    c, _ = load_policy("tiny-0.1m", seed=2)
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not torch.equal(pa["model.embed_tokens.weight"], pc["model.embed_tokens.weight"])


def test_unknown_name_lists_presets():
    with pytest.raises(ValueError, match="tiny-1m") as e:
        load_policy("no-such-model")
    assert "'bpe-tiny-0.1m', 'bpe-tiny-1m'" in str(e.value)
    with pytest.raises(ValueError, match="dtype"):
        load_policy("tiny-0.1m", dtype="int3")


@pytest.mark.parametrize(
    ("preset", "text"),
    [
        ("tiny-0.1m", "<|user|>hello<|end|>"),
        ("bpe-tiny-0.1m", "<|im_start|>user\nhello 🌲<|im_end|>"),
    ],
)
def test_save_and_reload_same_logprobs(tmp_path, preset, text):
    model, tok = load_policy(preset)
    save_policy(model, tok, tmp_path)
    again, tok2 = load_policy(str(tmp_path))
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
    assert tok2.encode(text, add_special_tokens=False) == ids[0].tolist()
    torch.testing.assert_close(token_logprobs(model, ids), token_logprobs(again, ids))
    assert tok2.chat_template == tok.chat_template and tok2.padding_side == "left"
    assert (tok2.eos_token_id, tok2.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)


def test_token_logprobs_matches_full_log_softmax_with_left_padding():
    model, tok = load_policy("tiny-0.1m")
    enc = tok(["abc", "hello there"], padding=True, return_tensors="pt")
    lp = token_logprobs(model, enc.input_ids, enc.attention_mask, temperature=0.7, chunk_size=3)
    assert lp.shape == (2, enc.input_ids.shape[1] - 1)
    # reference: the short prompt scored alone, via a full log_softmax
    ids = enc.input_ids[:1, -3:]
    logits = model(ids).logits[:, :-1] / 0.7
    ref = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(lp[:1, -2:], ref, atol=1e-5, rtol=0)


def test_bf16_weights_and_autocast():
    model, tok = load_policy("tiny-0.1m", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    fp32, _ = load_policy("tiny-0.1m")
    ids = torch.tensor([tok.encode("hello", add_special_tokens=False)])
    with autocast_ctx("bfloat16"):
        lp = token_logprobs(fp32, ids)
    assert lp.dtype == torch.float32
    torch.testing.assert_close(lp, token_logprobs(fp32, ids), atol=0.05, rtol=0)


def test_lora_trains_only_adapters_and_saves_merged(tmp_path):
    model, tok = load_policy("tiny-0.1m")
    ids = torch.tensor([tok.encode("hello world", add_special_tokens=False)])
    before = token_logprobs(model, ids).detach()
    lora = apply_lora(model, r=4, alpha=8)
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    torch.testing.assert_close(token_logprobs(lora, ids), before)  # B starts at 0
    opt = torch.optim.SGD([p for p in lora.parameters() if p.requires_grad], lr=1.0)
    (-token_logprobs(lora, ids).sum()).backward()
    opt.step()
    tuned = token_logprobs(lora, ids).detach()
    assert not torch.allclose(tuned, before)
    save_policy(lora, tok, tmp_path)
    merged, _ = load_policy(str(tmp_path))
    assert not any("lora" in k for k in merged.state_dict())
    torch.testing.assert_close(token_logprobs(merged, ids), tuned, atol=1e-5, rtol=0)


def test_lora_adapters_come_from_the_seed_and_leave_the_global_rng_alone():
    def adapters(seed):
        lora = apply_lora(load_policy("tiny-0.1m")[0], r=4, seed=seed)
        return {n: p.detach().clone() for n, p in lora.named_parameters() if "lora_A" in n}

    torch.manual_seed(123)
    first = adapters(0)
    after_first = torch.rand(1)  # the draw that would follow, had no adapters been made
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), after_first)
    again, other = adapters(0), adapters(1)
    assert first and all(torch.equal(first[n], again[n]) for n in first)
    assert not any(torch.equal(first[n], other[n]) for n in first)


def test_value_model_shapes_save_load(tmp_path):
    critic = ValueModel.from_policy_spec("tiny-0.1m", seed=3)
    ids = torch.tensor([[5, 20, 21, 22], [0, 0, 20, 21]])
    mask = (ids != 0).long()
    values = critic(ids, mask)
    assert values.shape == (2, 4)
    # left padding does not change the value of a real prefix
    alone = critic(ids[1:, 2:], mask[1:, 2:])
    torch.testing.assert_close(values[1:, 2:], alone, atol=1e-5, rtol=0)
    critic.save_pretrained(tmp_path)
    again = ValueModel.from_pretrained(tmp_path)
    torch.testing.assert_close(again(ids, mask), values)
    # a critic can start from a saved policy checkpoint (fresh head)
    policy, tok = load_policy("tiny-0.1m")
    save_policy(policy, tok, tmp_path / "policy")
    from_policy = ValueModel.from_policy_spec(str(tmp_path / "policy"))
    assert from_policy(ids, mask).shape == (2, 4)


@pytest.mark.parametrize("preset", sorted(MODEL_PRESETS))
def test_saved_tokenizer_reloads_with_the_same_ids_for_every_preset(tmp_path, preset):
    """D5: AutoTokenizer swapped a saved `qwen2` char tokenizer for Qwen2Tokenizer."""
    tok = load_tokenizer(preset)
    MODEL_PRESETS[preset].to_config(tok).save_pretrained(tmp_path)  # config.json: model_type
    tok.save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    text = "Numbers: 1 2 7 8. Target: 58.\n#.#\n<|user|>go<|end|>"
    ids = tok.encode(text, add_special_tokens=False)
    assert again.encode(text, add_special_tokens=False) == ids
    assert again.decode(ids) == text  # spaces and newlines survive
    assert (again.eos_token_id, again.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
    assert again.chat_template == tok.chat_template


def test_saving_prints_no_hf_shard_bar_and_keeps_the_bar_setting(tmp_path, capfd):
    from transformers.utils import logging as hf_logging

    from arborl.models.loading import save_policy

    model, tok = load_policy("tiny-0.1m")
    save_policy(model, tok, tmp_path / "p")
    assert "Writing model shards" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # other HF calls keep their bars
    assert load_policy(str(tmp_path / "p"))[0].num_parameters() == model.num_parameters()


def test_lora_wrapping_warns_nothing_the_user_did_not_do():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_lora(load_policy("tiny-0.1m")[0], r=4)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [
        str(w.message) for w in caught
    ]
