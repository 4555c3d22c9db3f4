"""The rollout views on a real byte-level BPE tokenizer (GPT-2's ranks + ChatML).

With BPE, re-encoding decoded text often gives other ids than the sampled ones, so these
checks have teeth that the char tokenizer's cannot: the episode view must hold exactly the
prompt plus the sampled ids at every turn, and rollout logprobs must rescore exactly.
"""

import pytest
import torch

from arborl.agent import AgentConfig
from arborl.generation import HFBackend, SamplingParams
from arborl.models import token_logprobs
from arborl.models.bpe import build_bpe_policy
from arborl.rollout import RolloutConfig, run_rollout


@pytest.fixture(scope="module")
def bpe():
    return build_bpe_policy(seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["arborl/Maze-v0", "arborl/Countdown-v0"])
def test_episode_view_is_prompt_plus_sampled_ids_with_bpe(bpe, env_id):
    model, tok = bpe
    cfg = RolloutConfig(view="episode", group_size=2, max_new_tokens=6, max_turns=3, seed=0)
    res = run_rollout(HFBackend(model, tok, seed=0), tok, env_id, [1, 2], cfg, AgentConfig())
    b, re_encoded_differs, turns = res.batch, 0, 0
    for r, ep in enumerate(res.episodes):
        n = int(b["attention_mask"][r].sum())
        seq = b["input_ids"][r, :n].tolist()
        for t in ep.turns:
            p, a = len(t.prompt_ids), len(t.response_ids)
            assert seq[:p] == t.prompt_ids and seq[p : p + a] == t.response_ids
            turns += 1
            re_encoded_differs += (
                tok.encode(tok.decode(t.response_ids), add_special_tokens=False) != t.response_ids
            )
    assert turns >= 4 and re_encoded_differs >= 1  # BPE drift was there to be caught
    with torch.no_grad():
        scored = token_logprobs(model, b["input_ids"], b["attention_mask"], cfg.temperature)
    mask = b["loss_mask"][:, 1:]
    assert float(((scored - b["old_logp"][:, 1:]) * mask).abs().max()) < 1e-4


def test_stop_string_ending_inside_a_token_keeps_the_whole_sampled_token(bpe):
    model, tok = bpe
    backend = HFBackend(model, tok, seed=0)
    chat = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    prompt = tok.encode(chat, add_special_tokens=False)
    free = backend.generate([prompt], SamplingParams(max_new_tokens=12, seed=3))[0]
    pieces = [tok.decode([t]) for t in free.token_ids]
    k = next(i for i, p in enumerate(pieces) if len(p.strip()) >= 2 and i > 0)
    stop = (
        tok.decode(free.token_ids[:k]) + pieces[k][: len(pieces[k]) - len(pieces[k].lstrip()) + 1]
    )[-4:]
    assert not tok.decode(free.token_ids[:k]).endswith(stop)  # it ends inside token k
    cut = backend.generate([prompt], SamplingParams(max_new_tokens=12, seed=3, stop=[stop]))[0]
    assert cut.token_ids == free.token_ids[: k + 1]  # the sampled token k is kept whole
    assert cut.finish_reason == "stop" and stop in tok.decode(cut.token_ids)
