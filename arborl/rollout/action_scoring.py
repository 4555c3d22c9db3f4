"""`ScoringPolicy` (`agent.action_mode=score`): choose among the env's valid actions by
scoring them with the LM instead of generating free text (GLAM, TWOSOME).

Each turn, for every live episode, the prompt is exactly the one free generation would
see (`LMPolicy`'s prompt code, memory and cache are reused, only `act` differs); each of
`info["available_actions"]` becomes a candidate response (`action_response`: the text the
action format would parse back to it, plus the end-of-turn token, i.e. the SFT target of
that action), and the action is sampled from the categorical of
`arborl.models.candidates` at the rollout temperature. An invalid action cannot occur,
and a small model only has to shift a K-way choice.

One forward pass scores every candidate of every live episode (chunked so that at most
`MAX_SCORED_LOGITS` logits exist at once): each distinct prompt is encoded once and the
candidates run on top of it (`candidate_token_logp`).

Sampling is seeded as `LMPolicy` seeds generation: episode-turn t of a rollout draws the
first uniform of the stream `row_seed(sample_seed, t)` (the stream a generated first
token would use), so a choice depends neither on which episodes share the call nor on the
engine's scheduling, and a resumed run draws the same choices.

What a turn records (`ScoredChoice`: candidate token ids, their normalisers, the chosen
index and its categorical log-probability) is what `arborl.rollout.batching` lays out as
`CHOICE_KEYS`, from which `arborl.train.update` recomputes the same categorical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from arborl.agent import AgentConfig, encode_text
from arborl.agent.parsing import action_response
from arborl.generation.base import GenerationBackend, row_seed
from arborl.generation.hf import row_uniforms, seeded_uniforms
from arborl.models.candidates import (
    candidate_token_logp,
    choice_logp,
    norm_divisor,
    sample_choice,
)
from arborl.rollout.config import RolloutConfig
from arborl.rollout.episode import EpisodeState, ScoredChoice
from arborl.rollout.policies import Decision, LMPolicy

MAX_SCORED_LOGITS = 2**25
"""Most logits (candidate tokens x vocabulary) one scoring forward may hold (128 MiB in
float32); more live episodes are scored in several forwards."""


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
        return list(dict.fromkeys(str(a) for a in actions))  # a duplicate would count twice

    def _tokens(self, action: str) -> tuple[list[int], int]:
        """(response token ids, number of words) of one candidate action."""
        hit = self._candidates.get(action)
        if hit is None:
            text = action_response(action, self.agent_cfg)
            ids = encode_text(self.tokenizer, text) + [self.eos_id]
            hit = self._candidates[action] = (ids, len(action.split()))
        return hit

    # --- acting -----------------------------------------------------------------------
    def act(self, episodes: Sequence[EpisodeState], envs: Sequence[Any]) -> list[Decision]:
        out: list[Decision | None] = [None] * len(episodes)
        rows: list[tuple[int, list[int], bool, list[str]]] = []  # (k, prompt, cut, actions)
        for k, ep in enumerate(episodes):
            prompt, cut = self._prompt(ep)
            if prompt is None:
                out[k] = Decision(action=None, end_reason="prompt_tokens")
                continue
            rows.append((k, prompt, cut, self._actions(ep)))
        if rows:
            uniforms = self._uniforms([episodes[r[0]] for r in rows])  # (R,)
            for start, stop in self._chunks(rows):
                chunk = rows[start:stop]
                for (k, prompt, cut, _), d in zip(chunk, self._choose(chunk, uniforms[start:stop])):
                    d.prompt_ids, d.prompt_truncated = prompt, cut
                    out[k] = d
            self.num_calls += 1
            self.prompts_per_call.append(len(rows))
        return out  # type: ignore[return-value]

    def _uniforms(self, eps: list[EpisodeState]) -> torch.Tensor:
        """(R,) one uniform per episode-turn, from the stream generation would use."""
        if all(ep.sample_seed is not None for ep in eps):
            seeds = [row_seed(ep.sample_seed, len(ep.turns)) for ep in eps]
            return seeded_uniforms(seeds, 1)[:, 0]
        if self.cfg.seed is not None:  # no episode streams: seeded by call and position
            return row_uniforms(self._params(1).seed, len(eps), 1)[:, 0]
        return torch.rand(len(eps), generator=self._generator)

    def _chunks(self, rows) -> list[tuple[int, int]]:
        """[start, stop) ranges of `rows` whose candidate tokens x vocabulary stay within
        `MAX_SCORED_LOGITS` (a single row over it gets a range of its own)."""
        vocab = int(self.model.config.vocab_size)
        out, start, cost = [], 0, 0
        for i, (_, _, _, actions) in enumerate(rows):
            row_cost = sum(len(self._tokens(a)[0]) for a in actions) * vocab
            if i > start and cost + row_cost > MAX_SCORED_LOGITS:
                out.append((start, i))
                start, cost = i, 0
            cost += row_cost
        out.append((start, len(rows)))
        return out

    @torch.inference_mode()
    def _choose(self, rows, uniforms: torch.Tensor) -> list[Decision]:
        """Score the candidates of `rows` in one forward and sample one per row."""
        prompts = [r[1] for r in rows]
        cands = [[self._tokens(a) for a in r[3]] for r in rows]
        norms = [
            [norm_divisor(self.agent_cfg.score_norm, len(ids), words) for ids, words in c]
            for c in cands
        ]
        ids, mask, cand_ids, cand_mask, cand_norm = self._tensors(prompts, cands, norms)
        token_logp = candidate_token_logp(self.model, ids, mask, cand_ids, cand_mask)
        valid = cand_mask.bool().any(-1)  # (R, K)
        logp = choice_logp(token_logp, cand_norm, valid, self.cfg.temperature).cpu()  # (R, K)
        chosen = sample_choice(logp, uniforms, greedy=self.cfg.temperature == 0).tolist()
        token_logp = token_logp.cpu()
        out = []
        for r, (row, c) in enumerate(zip(rows, chosen)):
            actions = row[3]
            resp = cands[r][c][0]
            choice = ScoredChoice(
                actions=actions,
                token_ids=[t for t, _ in cands[r]],
                norms=norms[r],
                chosen=int(c),
                logp=float(logp[r, c]),
            )
            out.append(
                Decision(
                    action=actions[c],
                    response_text=action_response(actions[c], self.agent_cfg),
                    response_ids=list(resp),
                    logprobs=token_logp[r, c, : len(resp)].tolist(),
                    choice=choice,
                )
            )
        return out

    def _tensors(self, prompts, cands, norms):
        """Left-padded (R, P) prompts and right-padded (R, K, L) candidates on the model's
        device, with (R, K) divisors (1 on empty slots)."""
        num_rows = len(prompts)
        p = max(map(len, prompts))
        k = max(map(len, cands))
        length = max(len(ids) for c in cands for ids, _ in c)
        ids = torch.full((num_rows, p), self.pad_id, dtype=torch.long)
        mask = torch.zeros((num_rows, p), dtype=torch.long)
        cand_ids = torch.full((num_rows, k, length), self.pad_id, dtype=torch.long)
        cand_mask = torch.zeros((num_rows, k, length), dtype=torch.long)
        cand_norm = torch.ones((num_rows, k), dtype=torch.float32)
        for r, (prompt, c) in enumerate(zip(prompts, cands)):
            ids[r, p - len(prompt) :] = torch.tensor(prompt)
            mask[r, p - len(prompt) :] = 1
            for j, (t, _) in enumerate(c):
                cand_ids[r, j, : len(t)] = torch.tensor(t)
                cand_mask[r, j, : len(t)] = 1
            cand_norm[r, : len(c)] = torch.tensor(norms[r])
        dev = self.device
        return ids.to(dev), mask.to(dev), cand_ids.to(dev), cand_mask.to(dev), cand_norm.to(dev)
