"""The `ranked` proposer's priors are the action-scoring policy's categorical.

`RankedActionsProposer` hands a node's prompt and actions to `ScoringPolicy` (the policy
of `agent.action_mode=score`), so on the state a score-mode rollout met, the proposer must
build the same prompt, score the same candidate tokens and give, as priors, the same
categorical: the one the rollout sampled its action from, and the one a brute-force
forward per candidate gives. Countdown's actions ("3 + 5") are several words and of
different token lengths, so the three norms differ.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from arborl.agent import AgentConfig
from arborl.agent.parsing import action_response
from arborl.generation.hf import HFBackend
from arborl.models import load_policy
from arborl.rollout import RolloutConfig, run_rollout
from arborl.search import LMProposer, RankedActionsProposer
from arborl.search.base import NodeView

ENV = "arborl/Countdown-v0"
SCORE = AgentConfig(action_mode="score", memory="last_k", memory_k=1)


@pytest.fixture(scope="module")
def policies():
    """(model, tokenizer) per preset: a char and a byte-level BPE tokenizer."""
    out = {}
    for preset in ("tiny-0.1m", "bpe-tiny-0.1m"):
        model, tok = load_policy(preset, seed=0)
        out[preset] = (model.eval(), tok)
    return out


def _brute_force(model, prompt, cands, divisors, temperature):
    """The categorical from one full forward per candidate, in float64."""
    scores = []
    for ids, div in zip(cands, divisors):
        seq = torch.tensor([prompt + ids])
        with torch.no_grad():
            logits = model(input_ids=seq).logits[0, len(prompt) - 1 : -1].double()
        lp = logits.log_softmax(-1).gather(-1, torch.tensor(ids)[:, None]).sum()
        scores.append(float(lp) / div / temperature)
    return torch.tensor(scores, dtype=torch.float64).softmax(-1).tolist()


def _divisor(norm, action, ids):
    return {"sum": 1.0, "token": float(len(ids)), "word": float(len(action.split()))}[norm]


@pytest.mark.parametrize(
    ("preset", "norm", "fmt"),
    [
        ("tiny-0.1m", "word", "plain"),
        ("tiny-0.1m", "token", "react"),
        ("bpe-tiny-0.1m", "sum", "plain"),
        ("bpe-tiny-0.1m", "word", "react"),
    ],
)
def test_ranked_priors_are_the_scoring_policys_categorical(policies, preset, norm, fmt):
    model, tok = policies[preset]
    agent = dataclasses.replace(SCORE, score_norm=norm, action_format=fmt)
    temperature = 0.7
    cfg = RolloutConfig(num_tasks=2, group_size=1, max_turns=2, seed=3, temperature=temperature)
    res = run_rollout(HFBackend(model, tok, seed=0), tok, ENV, None, cfg, agent)
    lm = LMProposer(HFBackend(model, tok, seed=0), tok, agent, temperature=temperature)
    ranked = RankedActionsProposer(lm)
    checked = 0
    for ep in res.episodes:
        history: list[tuple[str, str]] = []
        for turn in ep.turns:
            c = turn.choice
            view = NodeView(
                0, (), ep.instruction, turn.observation, history=tuple(history),
                available_actions=tuple(c.actions),
            )  # fmt: skip
            (cands,) = ranked.propose([view], len(c.actions), seeds=[0])
            got = {x.action: x for x in cands}
            assert sorted(got) == sorted(c.actions)
            for j, a in enumerate(c.actions):
                assert got[a].prompt_ids == turn.prompt_ids  # the rollout's prompt
                assert got[a].response_ids == c.token_ids[j]  # its candidate tokens
                assert got[a].response_text == action_response(a, agent)
            # The chosen action's prior is what the rollout sampled it with...
            assert got[turn.action].prior == pytest.approx(math.exp(c.logp), abs=1e-6)
            # ...and every prior is the normalised, tempered softmax, computed by hand.
            divisors = [_divisor(norm, a, ids) for a, ids in zip(c.actions, c.token_ids)]
            want = _brute_force(model, turn.prompt_ids, c.token_ids, divisors, temperature)
            assert [got[a].prior for a in c.actions] == pytest.approx(want, abs=1e-5)
            assert [x.prior for x in cands] == sorted((x.prior for x in cands), reverse=True)
            history.append((turn.observation, turn.response_text))
            checked += 1
    assert checked >= 3  # root states and at least one state with history


def test_ranked_search_reads_the_checkpoints_score_settings(policies, tmp_path):
    """`arborl search --proposer ranked --policy DIR` scores as DIR was trained to;
    `arborl eval --search` takes `--score-norm` over it."""
    from arborl.agent.settings import save_agent_settings
    from arborl.cli.main import build_parser
    from arborl.cli.search_cmd import build_parts
    from arborl.models import save_policy

    model, tok = policies["tiny-0.1m"]
    view = NodeView(0, (), "", "Numbers: 3 5 7. Target: 15.", available_actions=("3 + 5", "7"))
    priors = {}
    for norm in ("sum", "word"):
        path = tmp_path / norm
        save_policy(model, tok, path)
        save_agent_settings(path, dataclasses.replace(SCORE, score_norm=norm))
        flags = ["--policy", str(path), "--env", ENV, "--proposer", "ranked"]
        args = build_parser("search").parse_args(["search", *flags, "--algo", "mcts"])
        proposer, _, _ = build_parts(args, ENV)
        assert proposer.scorer.agent_cfg.score_norm == norm
        (cands,) = proposer.propose([view], 2, seeds=[0])
        priors[norm] = {x.action: x.prior for x in cands}
        args = build_parser("eval").parse_args(
            ["eval", *flags, "--search", "mcts", "--score-norm", "token"]
        )
        assert build_parts(args, ENV)[0].scorer.agent_cfg.score_norm == "token"
    # "3 + 5" is three words: only the word norm divides its log-probability by 3.
    assert priors["sum"]["3 + 5"] != pytest.approx(priors["word"]["3 + 5"], abs=1e-3)
