"""The rollout views on a real byte-level BPE tokenizer (the `bpe-tiny-0.1m` preset: GPT-2's
ranks + ChatML).

With BPE, re-encoding decoded text often gives other ids than the sampled ones, so these
checks have teeth that the char tokenizer's cannot: every training row must hold exactly
the prompt the backend was sent and the ids it sampled (the episode view: one growing
sequence, prompt plus sampled ids at every turn), and rollout logprobs must rescore.
"""

import pytest
import torch

from arborl.agent import AgentConfig, parse_action
from arborl.generation import HFBackend, SamplingParams
from arborl.models import load_policy, position_ids_from_mask, token_logprobs
from arborl.rollout import RolloutConfig, run_rollout
from tests.rollout.conftest import CountingBackend

CHAT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def bpe():
    model, tok = load_policy("bpe-tiny-0.1m", seed=0)
    return model.eval(), tok


def _served_as_stored(res, backend) -> int:
    """Assert every turn holds a prompt the backend was sent and exactly the ids (and
    logprobs) it sampled for it; return how many turns' ids do not survive a re-encode."""
    served = {tuple(p): [] for p, _ in backend.served}
    for p, c in backend.served:
        served[tuple(p)].append((c.token_ids, c.logprobs))
    tok, drifted = backend.inner.tokenizer, 0
    for ep in res.episodes:
        for t in ep.turns:
            assert (t.response_ids, t.logprobs) in served[tuple(t.prompt_ids)]
            text = tok.decode(t.response_ids, skip_special_tokens=False)
            drifted += tok.encode(text, add_special_tokens=False) != t.response_ids
    return drifted


def _check_rows(res, model, temperature: float) -> None:
    """The batch's rows are the turns' ids, and rescoring them gives the rollout logprobs."""
    b = res.batch
    if b.info["view"] == "step":
        p_len, turns = b.info["prompt_length"], [t for ep in res.episodes for t in ep.turns]
        for r, t in enumerate(turns):
            row = b["input_ids"][r, b["attention_mask"][r].bool()].tolist()
            assert row == t.prompt_ids + t.response_ids
        gen, old = b["response_mask"], b["old_logp"]
        slice_ = slice(p_len - 1, None)
    else:
        for r, ep in enumerate(res.episodes):
            seq = b["input_ids"][r, : int(b["attention_mask"][r].sum())].tolist()
            for t in ep.turns:  # every turn's prompt is a prefix, its sampled ids follow
                p, a = len(t.prompt_ids), len(t.response_ids)
                assert seq[:p] == t.prompt_ids and seq[p : p + a] == t.response_ids
        gen, old = b["loss_mask"][:, 1:], b["old_logp"][:, 1:]
        slice_ = slice(None)
    with torch.no_grad():
        scored = token_logprobs(model, b["input_ids"], b["attention_mask"], temperature)
    assert float(((scored[:, slice_] - old) * gen).abs().max()) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize(
    ("view", "memory", "async_envs"),
    [("step", "full", False), ("step", "last_k", False), ("step", "summary", False),
     ("episode", "full", False), ("episode", "full", True)],
)  # fmt: skip
def test_every_view_holds_the_prompts_sent_and_the_ids_sampled(bpe, view, memory, async_envs):
    model, tok = bpe
    backend = CountingBackend(HFBackend(model, tok, seed=0))
    cfg = RolloutConfig(view=view, group_size=2, max_new_tokens=6, max_turns=3, seed=0,
                        async_envs=async_envs)  # fmt: skip
    agent = AgentConfig(memory=memory, memory_k=1)
    res = run_rollout(backend, tok, "arborl/Maze-v0", [1, 2], cfg, agent)
    turns = sum(len(ep.turns) for ep in res.episodes)
    drifted = _served_as_stored(res, backend)
    assert turns >= 8 and drifted >= 1  # BPE drift was there to be caught
    _check_rows(res, model, cfg.temperature)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["arborl/Countdown-v0"])
def test_episode_view_on_a_text_env(bpe, env_id):
    model, tok = bpe
    backend = CountingBackend(HFBackend(model, tok, seed=0))
    cfg = RolloutConfig(view="episode", group_size=2, max_new_tokens=6, max_turns=3, seed=0)
    res = run_rollout(backend, tok, env_id, [1, 2], cfg, AgentConfig())
    assert _served_as_stored(res, backend) >= 1
    _check_rows(res, model, cfg.temperature)


def test_stop_string_ending_inside_a_token_keeps_the_whole_sampled_token(bpe):
    model, tok = bpe
    backend = HFBackend(model, tok, seed=0)
    prompt = tok.encode(CHAT, add_special_tokens=False)
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


# --- a multi-token end marker: `</action>` is 3 GPT-2 tokens, and `</action>.` ends in `>.`
REACT = "<think>go</think><action>d</action>. done"
AGENT = AgentConfig(action_format="react", include_instruction=False)


@pytest.fixture(scope="module")
def react_bpe():
    """bpe-tiny-0.1m taught (teacher forcing on the target tokens, 80 Adam steps) to answer
    any Maze prompt with `REACT`, so that it really samples the end marker and text after it."""
    model, tok = load_policy("bpe-tiny-0.1m", seed=0)
    cfg = RolloutConfig(view="step", max_new_tokens=2, max_turns=3, seed=0)
    res = run_rollout(HFBackend(model, tok, seed=0), tok, "arborl/Maze-v0", [1, 2, 3], cfg, AGENT)
    target = tok.encode(REACT + "<|im_end|>", add_special_tokens=False)
    seqs = sorted({tuple(t.prompt_ids + target) for ep in res.episodes for t in ep.turns})
    width, n = max(map(len, seqs)), len(target)
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for r, s in enumerate(seqs):  # left padding: the target ends every row
        ids[r, width - len(s) :], mask[r, width - len(s) :] = torch.tensor(s), 1
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(80):  # the LM head only where the target is predicted: (R, n, V)
        out = model.model(
            input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)
        )
        logits = model.lm_head(out.last_hidden_state[:, -n - 1 : -1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, -n:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), tok, float(loss.detach())


@pytest.mark.slow
@pytest.mark.parametrize("view", ["step", "episode"])
def test_multi_token_end_marker_ends_the_turn_and_the_action_is_parsed_from_text(react_bpe, view):
    model, tok, loss = react_bpe
    assert loss < 0.05
    marker = tok.encode("</action>", add_special_tokens=False)
    last = tok.encode(">.", add_special_tokens=False)
    assert len(marker) == 3 and len(last) == 1  # `</action>` ends inside the token `>.`
    backend = CountingBackend(HFBackend(model, tok, seed=0))
    cfg = RolloutConfig(view=view, group_size=2, max_new_tokens=24, max_turns=2, temperature=0.5)
    res = run_rollout(backend, tok, "arborl/Maze-v0", [4, 5], cfg, AGENT)
    assert all(p.stop == ["</action>"] for p in backend.params)
    turns = [t for ep in res.episodes for t in ep.turns]
    assert len(turns) >= 4
    marked = [t for t in turns if "</action>" in t.response_text]
    assert len(marked) >= 4 and all(t.finish_reason == "stop" for t in turns)
    for t in marked:  # cut at the very token that completed the marker
        assert "</action>" not in tok.decode(t.response_ids[:-1])
        assert t.response_text == tok.decode(t.response_ids) and "done" not in t.response_text
        assert t.action == parse_action(t.response_text, AGENT).action == "d" and t.format_ok
    inside = [t for t in marked if t.response_ids[-3:] == marker[:2] + last]
    assert len(inside) >= 4  # ... which is `>.`: the marker ended inside it, `.` is kept
    for t in turns:  # a slip of the sampler: no marker, so it ran on to <|im_end|>
        assert "</action>" in t.response_text or t.response_ids[-1] == tok.eos_token_id
    _served_as_stored(res, backend)
    _check_rows(res, model, cfg.temperature)
    if view == "episode":  # after a turn the template's close follows, not generated:
        newline = tok.encode("\n", add_special_tokens=False)
        for ep in res.episodes:  # `<|im_end|>\n` after a marker, `\n` after a sampled one
            for t in ep.turns[:-1]:
                after = len(t.prompt_ids) + len(t.response_ids)
                ended = t.response_ids[-1] == tok.eos_token_id
                close = newline if ended else [tok.eos_token_id, *newline]
                assert ep.seq_ids[after : after + len(close)] == close
                assert not any(ep.seq_generated[after : after + len(close)])
