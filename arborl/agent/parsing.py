"""Action parsing: completion text -> the action string sent to the env.

One `ActionFormat` (a parser and its stop strings) per format, `PLAIN`, `REACT` and
`REACT_TEXT`, found by `AgentConfig.action_format` in the `ACTION_FORMATS` registry.
Parsing never raises. A malformed response still yields an action (the raw text or "",
per `AgentConfig.on_format_error`) so the env can answer "invalid", and `format_ok=False`
lets the rewards layer apply a format penalty; the rollout loop never has to special-case it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from arborl.agent.config import ACTION_FORMATS, AgentConfig


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
    """Parse one response (with the end-of-turn token already removed) in the format
    `cfg.action_format` (see `ACTION_FORMATS`)."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    return ACTION_FORMATS.get(cfg.action_format).parse(text, cfg)


def _malformed(text: str, cfg: AgentConfig, thought: str | None = None) -> ParsedAction:
    action = text.strip() if cfg.on_format_error == "raw" else ""
    return ParsedAction(action=action, format_ok=False, thought=thought)


def parse_plain(text: str, cfg: AgentConfig) -> ParsedAction:
    """plain: the stripped text is the action; format_ok unless it is empty."""
    action = text.strip()
    return ParsedAction(action=action, format_ok=bool(action), thought=None)


def parse_react(text: str, cfg: AgentConfig) -> ParsedAction:
    """react: the first closed `<action>...</action>` block is the action; format_ok when it
    exists, is non-empty, and (if `require_thought`) a closed think block precedes it."""
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


def parse_react_text(text: str, cfg: AgentConfig) -> ParsedAction:
    """react_text: the last line starting `Action:` (any case) holds the action (the
    ReAct text format of AgentInstruct/OpenManus data); format_ok when it is non-empty (an empty `Action:` line gives the empty action)."""
    for line in reversed(text.splitlines()):
        if line.strip().lower().startswith("action:"):
            action = line.strip()[len("action:") :].strip()
            return ParsedAction(action=action, format_ok=bool(action), thought=None)
    return _malformed(text, cfg)


def stop_strings(cfg: AgentConfig) -> list[str]:
    """Stop strings for generation. plain: none, because the end-of-turn token is the EOS
    that every backend stops on by id (a text stop would cost a decode per token); react:
    the closing action tag, so the model cannot ramble on after its action."""
    return ACTION_FORMATS.get(cfg.action_format).stop_strings(cfg)


def _no_stops(cfg: AgentConfig) -> list[str]:
    return []


def action_response(action: str, cfg: AgentConfig) -> str:
    """The response text that says `action` in the format `cfg.action_format` (what
    `parse_action` reads back as that action, with no reasoning block): the candidate text
    `agent.action_mode=score` scores."""
    return ACTION_FORMATS.get(cfg.action_format).render(action, cfg)


def _render_plain(action: str, cfg: AgentConfig) -> str:
    return action


def _render_react(action: str, cfg: AgentConfig) -> str:
    return f"<{cfg.action_tag}>{action}</{cfg.action_tag}>"


def _render_react_text(action: str, cfg: AgentConfig) -> str:
    return f"Action: {action}"


@dataclass(frozen=True)
class ActionFormat:
    """One entry of `ACTION_FORMATS`: how a response holds its action."""

    parse: Callable[[str, AgentConfig], ParsedAction]
    """`(text, cfg) -> ParsedAction`; never raises."""
    stop_strings: Callable[[AgentConfig], list[str]] = _no_stops
    """Text stops for generation in this format."""
    render: Callable[[str, AgentConfig], str] = _render_plain
    """`(action, cfg) -> response text` that parses back to `action` (no reasoning block)."""


PLAIN = ActionFormat(parse_plain)
REACT = ActionFormat(parse_react, lambda cfg: [f"</{cfg.action_tag}>"], _render_react)
REACT_TEXT = ActionFormat(parse_react_text, render=_render_react_text)
