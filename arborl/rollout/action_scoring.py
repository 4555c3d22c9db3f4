"""`ScoringPolicy` (`agent.action_mode=score`): choose among the env's valid actions by
scoring them with the LM instead of generating free text (GLAM, TWOSOME).

Each turn, for every live episode, the prompt is exactly the one free generation would
see (`LMPolicy`'s prompt code, memory and cache are reused, only `act` differs); each of
`info["available_actions"]` becomes a candidate response (`action_response`: the text the
action format would parse back to it, plus the end-of-turn token, i.e. the SFT target of
that action), and the action is sampled from the categorical of
`arborl.models.candidates` at the rollout temperature. An invalid action cannot occur,
and a small model only has to shift a K-way choice.

One call scores every live episode's candidates: episodes in the same state (same prompt
and action list: a GRPO group early on) are scored once, each distinct prompt is encoded
once and its candidates run on top of its KV cache (`candidate_token_logp`), shortest
prompt first, in chunks of at most `MAX_SCORED_LOGITS` logits and `MAX_SCORED_PROMPT_TOKENS`
padded prompt tokens (so a short prompt is not padded to the turn's longest).

Sampling is seeded as `LMPolicy` seeds generation: episode-turn t of a rollout draws the
first uniform of the stream `row_seed(sample_seed, t)` (the stream a generated first
token would use), so a choice depends neither on which episodes share the call nor on the
engine's scheduling, and a resumed run draws the same choices.

What a turn records (`ScoredChoice`: candidate token ids, their normalisers, the chosen
index and its categorical log-probability) is what `arborl.rollout.batching` lays out as
`CHOICE_KEYS`, from which `arborl.train.update` recomputes the same categorical.

`scored_states` gives the categorical itself, without sampling: search's `ranked`
proposer (`arborl.search.proposers.RankedActionsProposer`) takes its PUCT priors from it,
so a tree's priors are the distribution this policy would sample the node's action from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from arborl.agent import AgentConfig, encode_text
from arborl.agent.parsing import action_response
from arborl.generation.base import GenerationBackend, row_seed
from arborl.generation.hf import row_uniforms, seeded_uniforms
from arborl.generation.lean import weights_key
from arborl.models.candidates import (
    candidate_token_logp,
    choice_logp,
    norm_divisor,
    sample_choice,
)
from arborl.phases import phase
from arborl.rollout.config import RolloutConfig
from arborl.rollout.episode import EpisodeState, ScoredChoice
from arborl.rollout.policies import Decision, LMPolicy

SCORED_CACHE_SIZE = 16384
"""Scored states a `ScoringPolicy` keeps for later turns (cleared when full or when the
weights change)."""
MAX_SCORED_PROMPT_TOKENS = 4096
"""Most padded prompt tokens (states x their longest prompt) one scoring forward encodes."""
MAX_SCORED_LOGITS = 2**25
"""Most logits (candidate tokens x vocabulary) one scoring forward may hold (128 MiB in
float32); more live episodes are scored in several forwards."""


def candidate_actions(actions: Sequence[Any]) -> list[str]:
    """A state's candidates: `info["available_actions"]` as strings, first occurrence kept
    (a duplicate would count twice in the categorical)."""
    return list(dict.fromkeys(str(a) for a in actions))


class ScoredState(NamedTuple):
    """One distinct (prompt, actions) state of a turn, scored (rows in it share it)."""

    actions: list[str]
    token_ids: list[list[int]]
    """Each candidate's response tokens."""
    norms: list[float]
    choice_logp: list[float]
    """(K,) the categorical's log-probabilities."""
    token_logp: list[list[float]]
    """(K, L_k) each candidate's token log-probabilities."""


class ScoringPolicy(LMPolicy):
    """An LM that picks each action from `info["available_actions"]` by scoring them."""

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer: Any,
        cfg: RolloutConfig,
        agent_cfg: AgentConfig,
        name: str = "lm",
    ) -> None:
        super().__init__(backend, tokenizer, cfg, agent_cfg, name=name)
        if cfg.view != "step":
            raise ValueError(
                f"agent.action_mode='score' records one categorical choice per step row; "
                f"rollout.view={cfg.view!r} must be 'step'"
            )
        model = getattr(backend, "model", None)
        if not isinstance(model, torch.nn.Module):
            raise ValueError(
                f"agent.action_mode='score' scores candidates with the model's own forward "
                f"pass, but the {type(backend).__name__} backend holds no local model (vLLM "
                "or an HTTP endpoint); use a preset or checkpoint policy with the HF backend, "
                "or agent.action_mode=generate"
            )
        self.model = model
        self.device = torch.device(getattr(backend, "device", "cpu"))
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._candidates: dict[str, tuple[list[int], int]] = {}  # action -> (ids, words)
        self._scored: dict[tuple, ScoredState] = {}  # (prompt, actions) -> its categorical
        self._scored_weights: tuple = ()  # `weights_key` the scores were computed with
        # Draws only when neither an episode stream nor rollout.seed is set (unseeded).
        self._generator = torch.Generator()
        self._generator.seed()

    # --- candidates -------------------------------------------------------------------
    def _actions(self, ep: EpisodeState) -> list[str]:
        actions = ep.info.get("available_actions")
        if not actions:
            raise ValueError(
                f"agent.action_mode='score' chooses among info['available_actions'], but "
                f"episode {ep.traj_id} (task {ep.task_id}) has {actions!r} at turn "
                f"{len(ep.turns)}; use agent.action_mode=generate for an env without a finite "
                "action list"
            )
        return candidate_actions(actions)

    def _tokens(self, action: str) -> tuple[list[int], int]:
        """(response token ids, number of words) of one candidate action."""
        hit = self._candidates.get(action)
        if hit is None:
            with phase("prompts"):
                text = action_response(action, self.agent_cfg)
                ids = encode_text(self.tokenizer, text) + [self.eos_id]
                hit = self._candidates[action] = (ids, len(action.split()))
        return hit

    # --- acting -----------------------------------------------------------------------
    def act(self, episodes: Sequence[EpisodeState], envs: Sequence[Any]) -> list[Decision]:
        out: list[Decision | None] = [None] * len(episodes)
        rows: list[tuple[int, list[int], bool, int]] = []  # (k, prompt, cut, state)
        states: dict[tuple, int] = {}  # (prompt, actions) -> index: a group's shared states
        for k, ep in enumerate(episodes):
            prompt, cut = self._prompt(ep)
            if prompt is None:
                out[k] = Decision(action=None, end_reason="prompt_tokens")
                continue
            key = (tuple(prompt), tuple(self._actions(ep)))
            rows.append((k, prompt, cut, states.setdefault(key, len(states))))
        if rows:
            with phase("score"):
                scored = self.scored_states(list(states))  # one per distinct state
            width = max(len(x.actions) for x in scored)
            logp = torch.full((len(scored), width), float("-inf"))  # (S, K)
            for i, x in enumerate(scored):
                logp[i, : len(x.actions)] = torch.tensor(x.choice_logp)
            logp = logp[torch.tensor([r[3] for r in rows])]  # (R, K): each row's categorical
            uniforms = self._uniforms([episodes[r[0]] for r in rows])  # (R,)
            chosen = sample_choice(logp, uniforms, greedy=self.cfg.temperature == 0).tolist()
            for (k, prompt, cut, u), c in zip(rows, chosen):
                x = scored[u]
                out[k] = Decision(
                    action=x.actions[c],
                    response_text=action_response(x.actions[c], self.agent_cfg),
                    prompt_ids=prompt,
                    response_ids=list(x.token_ids[c]),
                    logprobs=list(x.token_logp[c]),
                    prompt_truncated=cut,
                    choice=ScoredChoice(x.actions, x.token_ids, x.norms, c, x.choice_logp[c]),
                )
            self.num_calls += 1
            self.prompts_per_call.append(len(rows))
        return out  # type: ignore[return-value]

    def scored_states(self, states: list[tuple]) -> list[ScoredState]:
        """The categorical of each `(prompt ids, actions)` state (tuples; actions as
        `candidate_actions` gives them, at least one), what `act` samples from.

        Remembered for later turns while the weights stay the same: an episode that
        revisits a state, or a group's episodes that reach one on different turns, cost no
        forward (as `HFBackend` remembers prompt encodings). A policy serves one rollout or
        evaluation in training, so its numbers depend on that call's turns only."""
        key = weights_key(self.model)
        if key != self._scored_weights or len(self._scored) + len(states) > SCORED_CACHE_SIZE:
            self._scored, self._scored_weights = {}, key
        missing = [s for s in states if s not in self._scored]
        if missing:
            self._scored.update(zip(missing, self._score(missing)))
        return [self._scored[s] for s in states]

    def _uniforms(self, eps: list[EpisodeState]) -> torch.Tensor:
        """(R,) one uniform per episode-turn, from the stream generation would use."""
        if all(ep.sample_seed is not None for ep in eps):
            seeds = [row_seed(ep.sample_seed, len(ep.turns)) for ep in eps]
            return seeded_uniforms(seeds, 1)[:, 0]
        if self.cfg.seed is not None:  # no episode streams: seeded by call and position
            return row_uniforms(self._params(1).seed, len(eps), 1)[:, 0]
        return torch.rand(len(eps), generator=self._generator)

    def _score(self, states: list[tuple]) -> list[ScoredState]:
        """Each distinct (prompt, actions) state scored, shortest prompt first, in forwards
        of at most `MAX_SCORED_LOGITS` logits and `MAX_SCORED_PROMPT_TOKENS` padded prompt
        tokens; returned in the order of `states`."""
        vocab = int(self.model.config.vocab_size)
        order = sorted(range(len(states)), key=lambda i: len(states[i][0]))
        scored: dict[int, ScoredState] = {}
        chunk: list[int] = []
        cost = 0
        for i in order:
            prompt, actions = states[i]
            row_cost = sum(len(self._tokens(a)[0]) for a in actions) * vocab
            padded = (len(chunk) + 1) * len(prompt)  # sorted: this prompt is the longest
            if chunk and (cost + row_cost > MAX_SCORED_LOGITS or padded > MAX_SCORED_PROMPT_TOKENS):
                scored.update(zip(chunk, self._score_chunk([states[j] for j in chunk])))
                chunk, cost = [], 0
            chunk.append(i)
            cost += row_cost
        scored.update(zip(chunk, self._score_chunk([states[j] for j in chunk])))
        return [scored[i] for i in range(len(states))]

    @torch.inference_mode()
    def _score_chunk(self, states: list[tuple]) -> list[ScoredState]:
        norm = self.agent_cfg.score_norm
        cands = [[self._tokens(a) for a in actions] for _, actions in states]
        norms = [[norm_divisor(norm, len(ids), words) for ids, words in c] for c in cands]
        ids = [[t for t, _ in c] for c in cands]
        prompt_ids, prompt_mask, cand_ids, cand_mask, cand_norm = self._tensors(
            [list(prompt) for prompt, _ in states], ids, norms
        )
        token_logp = candidate_token_logp(self.model, prompt_ids, prompt_mask, cand_ids, cand_mask)
        valid = cand_mask.bool().any(-1)  # (S, K)
        logp = choice_logp(token_logp, cand_norm, valid, self.cfg.temperature).cpu()  # (S, K)
        token_logp = token_logp.cpu()
        logps, tokens = logp.tolist(), token_logp.tolist()  # plain floats, once per state
        return [
            ScoredState(
                list(actions), ids[s], norms[s], logps[s][: len(actions)],
                [tok[: len(t)] for tok, t in zip(tokens[s], ids[s])],
            )
            for s, (_, actions) in enumerate(states)
        ]  # fmt: skip

    def _tensors(self, prompts, cands, norms):
        """Left-padded (S, P) prompts and right-padded (S, K, L) candidates on the model's
        device, with (S, K) divisors (1 on empty slots); laid out as lists, converted once."""
        pad = self.pad_id
        p, k = max(map(len, prompts)), max(map(len, cands))
        length = max(len(t) for c in cands for t in c)
        ids = [[pad] * (p - len(x)) + x for x in prompts]
        mask = [[0] * (p - len(x)) + [1] * len(x) for x in prompts]
        cand_ids, cand_mask, cand_norm = [], [], []
        for c, n in zip(cands, norms):
            c = c + [[]] * (k - len(c))  # empty slots
            cand_ids.append([t + [pad] * (length - len(t)) for t in c])
            cand_mask.append([[1] * len(t) + [0] * (length - len(t)) for t in c])
            cand_norm.append(n + [1.0] * (k - len(n)))
        dev = self.device
        return (
            torch.tensor(ids, dtype=torch.long, device=dev),
            torch.tensor(mask, dtype=torch.long, device=dev),
            torch.tensor(cand_ids, dtype=torch.long, device=dev),
            torch.tensor(cand_mask, dtype=torch.long, device=dev),
            torch.tensor(cand_norm, dtype=torch.float32, device=dev),
        )
