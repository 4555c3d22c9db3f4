"""Prompts: observation + memory -> chat messages -> token ids.

Two ways to build the context a turn is generated from:
  - rebuilt (`step` view): every turn's prompt is rendered afresh from the episode's memory
    through the tokenizer's chat template (`build_prompt`);
  - growing (`episode` view): the context is the previous context + the generated ids
    exactly as generated + the tokens of the new observation message
    (`ChatContinuation.ids_after_turn`). Earlier text is never re-tokenized, so what the
    model saw at each turn is a prefix of the final sequence, token for token.
"""

from __future__ import annotations

from typing import Any

from arborl.agent.config import AgentConfig
from arborl.agent.memory import Memory, MemoryView


def format_observation(observation: str, cfg: AgentConfig) -> str:
    """The observation as shown: cut to its first `cfg.max_obs_chars` characters."""
    if cfg.max_obs_chars is not None and len(observation) > cfg.max_obs_chars:
        return observation[: cfg.max_obs_chars]
    return observation


def instruction_text(env_instruction: str, cfg: AgentConfig) -> str:
    """The instruction shown to the agent: `cfg.system_prompt`, else the env's own."""
    return cfg.system_prompt if cfg.system_prompt is not None else (env_instruction or "")


def user_content(
    observation: str, instruction: str, cfg: AgentConfig, first: bool, note: str | None = None
) -> str:
    """One user message: [instruction] [note] observation, joined by blank lines."""
    parts = []
    show = cfg.include_instruction and cfg.instruction_role == "user" and instruction
    if show and (first or cfg.repeat_instruction):
        parts.append(instruction)
    if note:
        parts.append(note)
    parts.append(format_observation(observation, cfg))
    return "\n\n".join(parts)


def build_messages(
    observation: str, view: MemoryView, instruction: str, cfg: AgentConfig
) -> list[dict[str, str]]:
    """Chat messages for one turn: past (observation, response) pairs as user/assistant
    messages, then the current observation. The instruction goes in a system message or
    before the first user message shown (per `cfg.instruction_role`)."""
    messages: list[dict[str, str]] = []
    if cfg.include_instruction and cfg.instruction_role == "system" and instruction:
        messages.append({"role": "system", "content": instruction})
    for i, (obs, response) in enumerate(view.turns):
        messages.append({"role": "user", "content": user_content(obs, instruction, cfg, i == 0)})
        messages.append({"role": "assistant", "content": response})
    first = not view.turns
    messages.append(
        {"role": "user", "content": user_content(observation, instruction, cfg, first, view.note)}
    )
    return messages


def render_chat(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    """The chat template's text for `messages`."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"tokenizer {type(tokenizer).__name__} has no chat_template; set "
            "`tokenizer.chat_template` (arborl's char tokenizer ships one)"
        )
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of already-templated text (special tokens parsed, none added)."""
    # verbose=False: long multi-turn prompts are expected; the rollout caps them itself.
    return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def build_prompt(
    tokenizer: Any, observation: str, memory: Memory, instruction: str, cfg: AgentConfig
) -> list[int]:
    """Prompt token ids for one turn, rebuilt from memory, ending in the generation prompt."""
    messages = build_messages(observation, memory.view(), instruction, cfg)
    return encode_text(tokenizer, render_chat(tokenizer, messages, add_generation_prompt=True))


class ChatContinuation:
    """Tokens that follow a generated assistant turn in the growing (`episode`) context.

    Worked out once from the chat template with sentinel messages: `close` is the text the
    template puts after an assistant message's content (e.g. `<|end|>`), and for a new user
    message the text up to and including the next generation prompt. When the generation
    already ended in the end-of-turn token, that part of `close` is not added again.
    """

    _U, _A = "ARBORL_SENTINEL_USER", "ARBORL_SENTINEL_ASSISTANT"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.eos_token_id
        self.eos_text = tokenizer.eos_token or ""
        head = [{"role": "user", "content": self._U}, {"role": "assistant", "content": self._A}]
        self._head_text = render_chat(tokenizer, head, add_generation_prompt=False)
        self._head = head
        self.close = self._head_text[self._head_text.rindex(self._A) + len(self._A) :]

    def text_after_turn(self, ended_with_eos: bool, content: str) -> str:
        """Template text between a generated turn and the next generation."""
        messages = [*self._head, {"role": "user", "content": content}]
        full = render_chat(self.tokenizer, messages, add_generation_prompt=True)
        if not full.startswith(self._head_text):
            raise ValueError(
                "view='episode' needs a chat template whose rendering of a conversation is a "
                "prefix of the rendering of its continuation; this template rewrites earlier "
                "turns. Use view='step'."
            )
        close = self.close
        if ended_with_eos and self.eos_text and close.startswith(self.eos_text):
            close = close[len(self.eos_text) :]
        return close + full[len(self._head_text) :]

    def ids_after_turn(self, generated_ids: list[int], content: str) -> list[int]:
        """Token ids to append after `generated_ids` for a new user message `content`."""
        ended = bool(generated_ids) and generated_ids[-1] == self.eos_id
        return encode_text(self.tokenizer, self.text_after_turn(ended, content))
