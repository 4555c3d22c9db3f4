"""Proposers: where a search's candidate actions come from.

- `ActionsProposer` ("actions"): the env's own `available_actions` (no model). Shuffled
  with the node's seed by default, so k < |actions| draws a seeded random subset and k=1
  is a seeded uniform random policy (best-of-N's samples then differ).
- `LMProposer` ("policy"): the policy samples `oversample * k` responses to the node's
  prompt (built exactly as the rollout loop builds it, from the node's history through
  the agent's memory) in one `generate` call, and keeps the first k distinct actions,
  with their tokens and logprobs so that search trees can be trained on. DFSDT's
  diversity: actions in `avoid` are dropped, and `diversity_note` (if set) puts the tried
  actions in the prompt, as ToolBench's DIVERSITY_PROMPT does. With `distinct=True` the k
  candidates are drawn one at a time, each barred from starting with an earlier one's
  first token (sampling without replacement at the first token): a confident policy then
  still offers k different actions for k samples' tokens, where plain sampling mostly
  repeats its favourite (HF backend only).
- `RankedActionsProposer` ("ranked"): the env's `available_actions`, ranked by the
  action-scoring policy (`agent.action_mode=score`, `arborl.rollout.action_scoring`),
  whose categorical gives the PUCT priors: score mode's counterpart in search.
- `FunctionProposer`: any `fn(view) -> list[str]` (synthetic trees in tests, scripted
  thought generators).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from arborl.search.base import Candidate, NodeView


def _distinct(actions: Sequence[str], avoid: Sequence[str], k: int) -> list[str]:
    out, seen = [], set(avoid)
    for a in actions:
        if a not in seen:
            seen.add(a)
            out.append(a)
        if len(out) == k:
            break
    return out


class ActionsProposer:
    """Candidates from `view.available_actions` (uniform priors)."""

    name = "actions"
    uses_model = False

    def __init__(self, shuffle: bool = True) -> None:
        self.shuffle = shuffle

    def propose(self, views, k, *, seeds, avoid=None) -> list[list[Candidate]]:
        out = []
        for i, (v, seed) in enumerate(zip(views, seeds)):
            if v.available_actions is None:
                raise ValueError(
                    "proposer 'actions' needs info['available_actions'], but the env gives "
                    "none at this node; use an LM proposer (--proposer policy) for this env"
                )
            acts = list(v.available_actions)
            if self.shuffle:
                random.Random(seed).shuffle(acts)
            chosen = _distinct(acts, avoid[i] if avoid else (), k)
            prior = 1.0 / max(1, len(v.available_actions))
            out.append([Candidate(action=a, response_text=a, prior=prior) for a in chosen])
        return out


class FunctionProposer:
    """Candidates from `fn(view) -> list[str]` in the order it gives (priors optional)."""

    uses_model = False

    def __init__(
        self,
        fn: Callable[[NodeView], Sequence[str]],
        priors: Callable[[NodeView], Sequence[float]] | None = None,
        name: str = "function",
    ) -> None:
        self.fn, self.priors, self.name = fn, priors, name

    def propose(self, views, k, *, seeds, avoid=None) -> list[list[Candidate]]:
        out = []
        for i, v in enumerate(views):
            acts = list(self.fn(v))
            pri = dict(zip(acts, self.priors(v))) if self.priors else {}
            chosen = _distinct(acts, avoid[i] if avoid else (), k)
            out.append([Candidate(action=a, response_text=a, prior=pri.get(a)) for a in chosen])
        return out


class LMProposer:
    """k distinct actions sampled from a policy behind a `GenerationBackend`."""

    name = "policy"
    uses_model = True

    def __init__(
        self,
        backend: Any,
        tokenizer: Any,
        agent_cfg: Any = None,
        max_new_tokens: int = 16,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        oversample: int = 2,
        diversity_note: bool = False,
        max_prompt_tokens: int | None = None,
        distinct: bool = False,
    ) -> None:
        from arborl.agent import AgentConfig

        if oversample < 1:
            raise ValueError(f"oversample={oversample!r} must be >= 1")
        self.backend, self.tokenizer = backend, tokenizer
        self.agent_cfg = agent_cfg or AgentConfig()
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.top_p, self.top_k, self.oversample = top_p, top_k, oversample
        self.diversity_note, self.max_prompt_tokens = diversity_note, max_prompt_tokens
        self.distinct = distinct
        eos = getattr(backend, "eos_token_ids", None) or [tokenizer.eos_token_id]
        self.eos_ids = {e for e in eos if e is not None}
        self.num_tokens = 0
        """Tokens generated so far (all samples, kept or not): the budget meter reads it."""
        self.token_cap: int | None = None
        """Set by the search before each call: tokens it may still generate (None: any)."""

    def prompt_ids(self, view: NodeView, avoid: Sequence[str] = ()) -> list[int]:
        """The node's prompt, rebuilt from its history as the rollout loop does."""
        from arborl.agent import (
            build_messages,
            encode_text,
            instruction_text,
            make_memory,
            render_chat,
        )

        memory = make_memory(self.agent_cfg)
        for obs, response in view.history:
            memory.add(obs, response)
        mv = memory.view()
        if self.diversity_note and avoid:
            tried = ", ".join(repr(a) for a in avoid)
            mv.note = f"Already tried here: {tried}. Choose a different action."
        instr = instruction_text(view.instruction, self.agent_cfg)
        messages = build_messages(view.observation, mv, instr, self.agent_cfg)
        ids = encode_text(self.tokenizer, render_chat(self.tokenizer, messages, True))
        limit = self.max_prompt_tokens
        return ids[-limit:] if limit and len(ids) > limit else ids

    def _sizes(self, num_views: int, k: int) -> tuple[int, int]:
        """(samples per view, max new tokens) within `token_cap`."""
        n, m = self.oversample * k, self.max_new_tokens
        if self.token_cap is not None:
            per_view = max(1, self.token_cap // max(1, num_views))
            n = max(1, min(n, per_view // m)) if per_view >= m else 1
            m = min(m, max(1, per_view // n))
        return n, m

    def _params(self, max_new_tokens: int, seed: int, banned: list[int] | None = None):
        from arborl.agent import stop_strings
        from arborl.generation.base import SamplingParams

        return SamplingParams(
            max_new_tokens=max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop=stop_strings(self.agent_cfg),
            seed=int(seed) % (2**62),
            banned_first_tokens=list(banned or []),
        )

    def _completions(self, prompt: list[int], n: int, m: int, k: int, seed: int, cap) -> list:
        """`n` samples of up to `m` tokens; with `distinct`, up to `k` drawn one by one,
        each barred from an earlier one's first token, within `cap` tokens (None: any)."""
        if not self.distinct:
            return self.backend.generate([prompt] * n, self._params(m, seed))
        out: list = []
        for j in range(k):
            if cap is not None and cap < 1:
                break
            size = self.max_new_tokens if cap is None else min(self.max_new_tokens, cap)
            banned = sorted({c.token_ids[0] for c in out if c.token_ids})
            (c,) = self.backend.generate([prompt], self._params(size, seed + j, banned))
            out.append(c)
            cap = None if cap is None else cap - len(c.token_ids)
        return out

    def propose(self, views, k, *, seeds, avoid=None) -> list[list[Candidate]]:
        from arborl.agent import parse_action

        n, m = self._sizes(len(views), k)
        cap = None if self.token_cap is None else max(1, self.token_cap // max(1, len(views)))
        out = []
        for i, (v, seed) in enumerate(zip(views, seeds)):
            tried = list(avoid[i]) if avoid else []
            prompt = self.prompt_ids(v, tried)
            completions = self._completions(prompt, n, m, k, int(seed), cap)
            seen, cands = set(tried), []
            for c in completions:
                ids = list(c.token_ids)
                self.num_tokens += len(ids)
                body = ids[:-1] if ids and ids[-1] in self.eos_ids else ids
                text = self.tokenizer.decode(body, skip_special_tokens=False)
                parsed = parse_action(text, self.agent_cfg)
                action = parsed.action or text
                if action in seen or len(cands) >= k:
                    continue
                seen.add(action)
                cands.append(
                    Candidate(
                        action=action,
                        response_text=text,
                        prior=math.exp(sum(c.logprobs)) if c.logprobs else None,
                        format_ok=parsed.format_ok,
                        prompt_ids=list(prompt),
                        response_ids=ids,
                        logprobs=list(c.logprobs),
                        finish_reason=c.finish_reason,
                    )
                )
            total = sum(c.prior or 0.0 for c in cands)
            for c in cands:  # priors renormalised over the distinct candidates kept
                c.prior = (c.prior or 0.0) / total if total > 0 else 1.0 / len(cands)
            out.append(cands)
        return out


class RankedActionsProposer:
    """The env's available_actions ranked by the action-scoring policy's categorical.

    For finite action sets this uses the policy without sampling: the node's prompt (built
    as the rollout builds it) and its actions go to the `ScoringPolicy` of
    `agent.action_mode=score`, which scores every action's response text (as the action
    format writes it, plus the end-of-turn token) over one KV-cached prompt encoding,
    normalised by `agent.score_norm` and tempered by the proposer's temperature. The k most
    likely actions not in `avoid` are returned with their probabilities under that
    categorical as PUCT priors (over all the node's actions, so a child's prior does not
    change as its siblings are tried), and a node's children can be widened until every
    action is tried. A confident policy that samples the same action again and again
    cannot starve the search this way. The candidates carry token ids and logprobs (at
    temperature 1, as score mode records them), so trees still export to training rows.
    """

    name = "ranked"
    uses_model = True

    def __init__(self, lm: LMProposer) -> None:
        import torch

        from arborl.rollout import RolloutConfig
        from arborl.rollout.action_scoring import ScoringPolicy

        if not isinstance(getattr(lm.backend, "model", None), torch.nn.Module):
            raise ValueError(
                "proposer 'ranked' scores the env's actions with the model's own forward pass; "
                "pass an in-process policy (--policy <preset|checkpoint dir>, not a URL)"
            )
        self.lm = lm
        cfg = RolloutConfig(temperature=lm.temperature)
        self.scorer = ScoringPolicy(lm.backend, lm.tokenizer, cfg, lm.agent_cfg, name="ranked")
        self.num_tokens = 0  # nothing is generated: scoring spends no token budget

    def propose(self, views, k, *, seeds, avoid=None) -> list[list[Candidate]]:
        from arborl.agent.parsing import action_response
        from arborl.rollout.action_scoring import candidate_actions

        states: list[tuple] = []
        for v in views:
            if v.available_actions is None:
                raise ValueError(
                    "proposer 'ranked' needs info['available_actions'], but the env gives "
                    "none at this node; use --proposer policy for this env"
                )
            limit = self.scorer.max_prompt_tokens  # the rollout's cut: its last tokens
            prompt = self.lm.prompt_ids(v)[-limit:]
            states.append((tuple(prompt), tuple(candidate_actions(v.available_actions))))
        live = list(dict.fromkeys(s for s in states if s[1]))  # nodes in one state: once
        scored = dict(zip(live, self.scorer.scored_states(live))) if live else {}
        out = []
        for i, state in enumerate(states):
            x = scored.get(state)
            if x is None:  # no actions at this node
                out.append([])
                continue
            tried = set(avoid[i]) if avoid else set()
            probs = [math.exp(lp) for lp in x.choice_logp]  # (K,) the categorical
            open_ = [j for j, a in enumerate(x.actions) if a not in tried]
            order = sorted(open_, key=lambda j: (-probs[j], j))[:k]
            out.append(
                [
                    Candidate(
                        action=x.actions[j],
                        response_text=action_response(x.actions[j], self.lm.agent_cfg),
                        prior=probs[j],
                        prompt_ids=list(state[0]),
                        response_ids=list(x.token_ids[j]),
                        logprobs=list(x.token_logp[j]),
                    )
                    for j in order
                ]
            )
        return out
