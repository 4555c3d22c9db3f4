"""Policies behind one protocol, so rollout and eval run an LM, random or oracle alike.

A `Policy` gets the live episodes of one turn (and their envs) and returns one `Decision`
each. `LMPolicy` wraps a `GenerationBackend`: it builds every live episode's prompt
(rebuilt from memory in the `step` view, the growing token sequence in the `episode`
view), makes exactly one `backend.generate` call for all of them, cuts each completion to
its episode budget and parses the action. `RandomPolicy` and `OraclePolicy` are the
baselines every eval table shows beside a trained model.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from arborl.agent import (
    AgentConfig,
    ChatContinuation,
    build_prompt,
    instruction_text,
    make_memory,
    parse_action,
    stop_strings,
    user_content,
)
from arborl.agent.config import ACTION_MODES
from arborl.generation.base import MAX_SEED, GenerationBackend, SamplingParams, row_seed
from arborl.registry import Registry
from arborl.rollout.config import RolloutConfig
from arborl.rollout.episode import EpisodeState, ScoredChoice

PROMPT_CACHE_SIZE = 4096
"""Rendered prompts an `LMPolicy` keeps (cleared when full)."""


@dataclass
class Decision:
    """What a policy chose for one live episode this turn."""

    action: str | None
    """Action for the env; None ends the episode unstepped (reason in `end_reason`)."""
    response_text: str = ""
    """The raw response (equal to `action` for non-LM policies)."""
    format_ok: bool = True
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    prompt_truncated: bool = False
    end_reason: str = ""
    choice: ScoredChoice | None = None
    """Score mode (`agent.action_mode=score`): the candidates and the one chosen."""


class Policy(Protocol):
    """Choose actions for the live episodes of one turn (or, in the async mode, for the
    episodes that are ready). A policy may also have `begin_rollout(episodes)`, which the
    engine calls once after the resets (`LMPolicy` seeds each episode's stream there)."""

    name: str

    def act(self, episodes: Sequence[EpisodeState], envs: Sequence[Any]) -> list[Decision]: ...


class RandomPolicy:
    """Uniform over `info['available_actions']`, else random letters (1-8 chars)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def act(self, episodes: Sequence[EpisodeState], envs: Sequence[Any]) -> list[Decision]:
        out = []
        for ep in episodes:
            actions = ep.info.get("available_actions")
            if actions:
                a = self.rng.choice(list(actions))
            else:
                n = self.rng.randint(1, 8)
                a = "".join(self.rng.choice(string.ascii_lowercase) for _ in range(n))
            out.append(Decision(action=a, response_text=a))
        return out


class OraclePolicy:
    """The env's own expert: `env.oracle_action()`."""

    name = "oracle"

    def __init__(self, seed: int = 0) -> None:
        """`seed` is unused (the oracle is deterministic); every baseline takes one."""

    def act(self, episodes: Sequence[EpisodeState], envs: Sequence[Any]) -> list[Decision]:
        out = []
        for env in envs:
            if not hasattr(env, "oracle_action"):
                raise NotImplementedError(
                    f"{type(env).__name__} has no oracle_action(); the oracle policy needs an "
                    "env with an expert solver"
                )
            a = env.oracle_action()
            out.append(Decision(action=a, response_text=a))
        return out


class LMPolicy:
    """A language model behind a `GenerationBackend`, one generate call per turn."""

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer: Any,
        cfg: RolloutConfig,
        agent_cfg: AgentConfig,
        name: str = "lm",
    ) -> None:
        if cfg.view == "episode" and agent_cfg.memory != "full":
            raise ValueError(
                f"rollout.view='episode' keeps the whole token sequence, so agent.memory must "
                f"be 'full', got {agent_cfg.memory!r}; use view='step' for other memories"
            )
        self.backend, self.tokenizer, self.cfg, self.agent_cfg = backend, tokenizer, cfg, agent_cfg
        self.name = name
        self.continuation = ChatContinuation(tokenizer) if cfg.view == "episode" else None
        eos = getattr(backend, "eos_token_ids", None) or [tokenizer.eos_token_id]
        self.eos_ids = {e for e in eos if e is not None}
        limit = cfg.max_prompt_tokens or 10**9
        model_limit = getattr(backend, "max_length", None)
        if model_limit:  # a prompt must leave room for at least one new token
            limit = min(limit, int(model_limit) - 1)
        self.max_prompt_tokens = limit
        self.num_calls = 0
        self.num_rollouts = 0
        self.prompts_per_call: list[int] = []
        self.prompt_truncations = 0
        self._prompt_cache: dict[tuple, tuple[int, ...]] = {}

    # --- prompts ------------------------------------------------------------------------
    def _instruction(self, ep: EpisodeState) -> str:
        return instruction_text(ep.instruction, self.agent_cfg)

    def _sync(self, ep: EpisodeState) -> None:
        """Add the turns stepped since the last call to memory / the growing sequence."""
        for t in ep.turns[ep.num_synced :]:
            if self.continuation is None:
                ep.memory.add(t.observation, t.response_text)
            else:
                content = user_content(ep.observation, self._instruction(ep), self.agent_cfg, False)
                ids = self.continuation.ids_after_turn(t.response_ids or [], content)
                turn = len(ep.turns)
                ep.seq_ids += ids
                ep.seq_generated += [False] * len(ids)
                ep.seq_logp += [0.0] * len(ids)
                ep.seq_turn += [turn] * len(ids)
        ep.num_synced = len(ep.turns)

    def _prompt(self, ep: EpisodeState) -> tuple[list[int] | None, bool]:
        """(prompt ids or None when the episode must end, whether it was left-truncated)."""
        if ep.memory is None:
            ep.memory = make_memory(self.agent_cfg)
        first = not ep.turns
        self._sync(ep)
        if self.continuation is not None and not first:
            if len(ep.seq_ids) > self.max_prompt_tokens:
                return None, False
            return list(ep.seq_ids), False
        ids = self._build_prompt(ep)
        cut = len(ids) > self.max_prompt_tokens
        if cut:
            ids = ids[-self.max_prompt_tokens :]
            self.prompt_truncations += 1
        if self.continuation is not None:  # the episode's sequence starts with this prompt
            ep.seq_ids, ep.seq_generated = list(ids), [False] * len(ids)
            ep.seq_logp, ep.seq_turn = [0.0] * len(ids), [0] * len(ids)
        return ids, cut

    def _build_prompt(self, ep: EpisodeState) -> list[int]:
        """`build_prompt`, remembered by what it reads (observation, memory view,
        instruction): episodes of a group meet the same states, and the chat template and
        tokenizer cost more than the lookup."""
        view = ep.memory.view()
        instruction = self._instruction(ep)
        key = (ep.observation, tuple(view.turns), view.note, instruction)
        ids = self._prompt_cache.get(key)
        if ids is None:
            if len(self._prompt_cache) >= PROMPT_CACHE_SIZE:
                self._prompt_cache.clear()
            ids = self._prompt_cache[key] = tuple(
                build_prompt(self.tokenizer, ep.observation, ep.memory, instruction, self.agent_cfg)
            )
        return list(ids)

    # --- acting -------------------------------------------------------------------------
    def begin_rollout(self, episodes: Sequence[EpisodeState]) -> None:
        """Give each episode of a new rollout its own sampling stream, keyed by (cfg.seed,
        this policy's rollout count, pool index), so an episode's tokens never depend on
        which episodes share its generate call, nor on the engine's scheduling; a policy
        reused over several rollouts (e.g. `collect_episodes`' chunks) never repeats one."""
        if self.cfg.seed is None:
            return  # unseeded: the backend's own generator, as before
        for ep in episodes:
            key = [self.cfg.seed, self.num_rollouts, ep.index]
            ep.sample_seed = int(np.random.default_rng(key).integers(0, MAX_SEED))
        self.num_rollouts += 1

    def _params(self, max_new_tokens: int, row_seeds: list[int] | None = None) -> SamplingParams:
        cfg = self.cfg
        seed = None if cfg.seed is None else (cfg.seed * 1_000_003 + self.num_calls) % (2**62)
        return SamplingParams(
            row_seeds=row_seeds,
            max_new_tokens=max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            stop=stop_strings(self.agent_cfg),
            seed=seed,
        )

    def act(self, episodes: Sequence[EpisodeState], envs: Sequence[Any]) -> list[Decision]:
        out: list[Decision | None] = [None] * len(episodes)
        rows: list[tuple[int, list[int], int, bool]] = []  # (k, prompt, budget, truncated)
        for k, ep in enumerate(episodes):
            prompt, cut = self._prompt(ep)
            if prompt is None:
                out[k] = Decision(action=None, end_reason="prompt_tokens")
                continue
            budget = self.cfg.max_new_tokens
            if self.cfg.max_episode_tokens is not None:
                budget = min(budget, self.cfg.max_episode_tokens - ep.generated_tokens)
            rows.append((k, prompt, budget, cut))
        if rows:
            eps = [episodes[r[0]] for r in rows]
            row_seeds = None  # episodes without a stream: seeded by call and position
            if all(ep.sample_seed is not None for ep in eps):
                row_seeds = [row_seed(ep.sample_seed, len(ep.turns)) for ep in eps]
            params = self._params(max(r[2] for r in rows), row_seeds)
            completions = self.backend.generate([r[1] for r in rows], params)
            self.num_calls += 1
            self.prompts_per_call.append(len(rows))
            for (k, prompt, budget, cut), c in zip(rows, completions):
                out[k] = self._decide(episodes[k], prompt, budget, cut, c)
        return out  # type: ignore[return-value]

    def _decide(self, ep: EpisodeState, prompt, budget, cut, c) -> Decision:
        ids, logps, finish = list(c.token_ids), list(c.logprobs), c.finish_reason
        if len(ids) > budget:  # one call serves rows with different episode budgets
            ids, logps, finish = ids[:budget], logps[:budget], "length"
        body = ids[:-1] if ids and ids[-1] in self.eos_ids else ids
        text = self.tokenizer.decode(body, skip_special_tokens=False)
        parsed = parse_action(text, self.agent_cfg)
        if self.continuation is not None:
            turn = len(ep.turns)
            ep.seq_ids += ids
            ep.seq_generated += [True] * len(ids)
            ep.seq_logp += logps
            ep.seq_turn += [turn] * len(ids)
        return Decision(
            action=parsed.action,
            response_text=text,
            format_ok=parsed.format_ok,
            prompt_ids=prompt,
            response_ids=ids,
            logprobs=logps,
            finish_reason=finish,
            prompt_truncated=cut,
        )


BASELINE_POLICIES: Registry = Registry("policy")
"""Policies that need no model, by `--policy` name: classes built as `cls(seed=seed)`."""
BASELINE_POLICIES.register("random", RandomPolicy)
BASELINE_POLICIES.register("oracle", OraclePolicy)


def make_policy(
    spec: str,
    cfg: RolloutConfig,
    agent_cfg: AgentConfig | None = None,
    seed: int = 0,
    tokenizer: Any = None,
) -> Policy:
    """A policy from a spec string: "random", "oracle", a tiny preset name, a checkpoint
    directory or an OpenAI-compatible URL (which needs `tokenizer`, a preset or dir name)."""
    if spec in BASELINE_POLICIES:
        return BASELINE_POLICIES.get(spec)(seed=seed)
    from arborl.generation import make_backend

    try:
        backend, tok = make_backend(spec, tokenizer=tokenizer, seed=seed)
    except ValueError as e:
        raise ValueError(
            f"policy {spec!r} is not one of {BASELINE_POLICIES.names()} and no model could be "
            f"made from it: {e}"
        ) from e
    return make_lm_policy(backend, tok, cfg, agent_cfg or AgentConfig(), name=spec)


def make_lm_policy(
    backend: GenerationBackend,
    tokenizer: Any,
    cfg: RolloutConfig,
    agent_cfg: AgentConfig,
    name: str = "lm",
) -> LMPolicy:
    """The LM policy of `agent_cfg.action_mode` (`ACTION_MODES`): `LMPolicy` generates
    each action, `arborl.rollout.action_scoring.ScoringPolicy` scores the env's list."""
    cls = ACTION_MODES.get(agent_cfg.action_mode).policy_class()
    return cls(backend, tokenizer, cfg, agent_cfg, name=name)
