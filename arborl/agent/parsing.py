"""Action parsing: completion text -> the action string sent to the env.

Parsing never raises. A malformed response still yields an action (the raw text or "", per
`AgentConfig.on_format_error`) so the env can answer "invalid", and `format_ok=False` lets
the rewards layer apply a format penalty; the rollout loop never has to special-case it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from arborl.agent.config import AgentConfig


@dataclass(frozen=True)
class ParsedAction:
    """What a response meant."""

    action: str
    """The action text for the env (stripped of surrounding whitespace)."""
    format_ok: bool
    """The response followed `AgentConfig.action_format`."""
    thought: str | None = None
    """The reasoning block's text in the "react" format (None when absent)."""


@lru_cache(maxsize=64)
def _block_re(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)


def parse_action(text: str, cfg: AgentConfig) -> ParsedAction:
    """Parse one response (with the end-of-turn token already removed).

    plain: the stripped text is the action; format_ok unless it is empty.
    react: the first closed `<action>...</action>` block is the action; format_ok when it
    exists, is non-empty, and (if `require_thought`) a closed think block precedes it.
    """
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if cfg.action_format == "plain":
        action = text.strip()
        return ParsedAction(action=action, format_ok=bool(action), thought=None)

    think = _block_re(cfg.think_tag).search(text)
    thought = think.group(1).strip() if think else None
    act = _block_re(cfg.action_tag).search(text)
    ok = act is not None and bool(act.group(1).strip())
    if ok and cfg.require_thought:
        ok = think is not None and think.end() <= act.start()
    if act is not None and act.group(1).strip():
        action = act.group(1).strip()
    else:
        action = text.strip() if cfg.on_format_error == "raw" else ""
    if not ok and cfg.on_format_error == "empty":
        action = ""
    return ParsedAction(action=action, format_ok=ok, thought=thought)


def stop_strings(cfg: AgentConfig) -> list[str]:
    """Stop strings for generation. plain: none, because the end-of-turn token is the EOS
    that every backend stops on by id (a text stop would cost a decode per token); react:
    the closing action tag, so the model cannot ramble on after its action."""
    if cfg.action_format == "react":
        return [f"</{cfg.action_tag}>"]
    return []
