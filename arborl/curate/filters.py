"""Row filters: each is a named check returning None (keep) or the reason to drop.

Filters are small functions in a registry (`FILTERS`) run in order; the first that fails
names the drop reason, so the report can say exactly why every row went. Which ones run
follows from `FilterConfig` (a check whose setting is off is skipped).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from arborl.curate.config import FilterConfig
from arborl.curate.records import Record, action_of, trajectory_to_messages

Check = Callable[[Record, FilterConfig, Callable[[str], int]], str | None]


def make_token_counter(tokenizer: str) -> Callable[[str], int]:
    """Token counter for `filters.tokenizer`: whitespace, chars, or a model's tokenizer."""
    if tokenizer == "whitespace":
        return lambda text: len(text.split())
    if tokenizer == "chars":
        return len
    from arborl.models import load_tokenizer

    try:
        tok = load_tokenizer(tokenizer)
    except ValueError as e:
        raise ValueError(f"filters.tokenizer={tokenizer!r}: {e}; or use whitespace / chars") from e
    return lambda text: len(tok.encode(text, add_special_tokens=False))


def _won(r: Record, cfg: FilterConfig, count) -> str | None:
    if cfg.won_only and not r.traj.won:
        return "not won (filters.won_only)"
    return None


def _min_return(r: Record, cfg: FilterConfig, count) -> str | None:
    if cfg.min_return is not None and r.traj.total_return < cfg.min_return:
        return f"return {r.traj.total_return:g} < filters.min_return={cfg.min_return:g}"
    return None


def _turns(r: Record, cfg: FilterConfig, count) -> str | None:
    n = r.traj.num_steps
    if n < cfg.min_turns:
        return f"{n} turns < filters.min_turns={cfg.min_turns}"
    if cfg.max_turns is not None and n > cfg.max_turns:
        return f"{n} turns > filters.max_turns={cfg.max_turns}"
    return None


def _tokens(r: Record, cfg: FilterConfig, count) -> str | None:
    if cfg.max_tokens is None:
        return None
    n = sum(count(m["content"]) for m in trajectory_to_messages(r.traj))
    if n > cfg.max_tokens:
        return f"{n} tokens > filters.max_tokens={cfg.max_tokens} ({cfg.tokenizer})"
    return None


def _action_format(r: Record, cfg: FilterConfig, count) -> str | None:
    regex = re.compile(cfg.action_regex) if cfg.action_regex else None
    for i, s in enumerate(r.traj.steps):
        if cfg.action_format != "any":
            text = s.action if s.response is None else s.response
            if not action_of(text, cfg.action_format)[1]:
                return f"turn {i}: response does not parse as {cfg.action_format} (filters.action_format)"
        if regex is not None and not regex.fullmatch(s.action):
            return f"turn {i}: action {s.action[:40]!r} does not match filters.action_regex"
    return None


def _valid_actions(r: Record, cfg: FilterConfig, count) -> str | None:
    if not cfg.valid_actions_only:
        return None
    for i, s in enumerate(r.traj.steps):
        if s.info.get("valid_action") is False:
            return f"turn {i}: the env rejected the action (filters.valid_actions_only)"
    return None


# Unicode's control (Cc: U+0000-001F, U+007F-009F) and surrogate (Cs: U+D800-DFFF)
# categories are fixed ranges, so one character class finds the first bad character at C
# speed instead of a category lookup per character.
_BAD = {
    "printable": re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffd]"),
    "ascii": re.compile("[^\t\n\r\x20-\x7e]"),
}


def bad_char(text: str, charset: str) -> str | None:
    """The first character of `text` outside `charset` (printable / ascii), or None:
    control characters other than newline, tab and carriage return, lone surrogates and
    U+FFFD (broken decoding) are outside both; ascii also excludes everything past U+007F."""
    m = _BAD[charset].search(text)
    return m.group() if m else None


def _charset(r: Record, cfg: FilterConfig, count) -> str | None:
    if cfg.charset == "any":
        return None
    for m in trajectory_to_messages(r.traj):
        ch = bad_char(m["content"], cfg.charset)
        if ch is not None:
            return f"character {ch!r} (U+{ord(ch):04X}) outside filters.charset={cfg.charset}"
    return None


FILTERS: dict[str, Check] = {
    "won_only": _won,
    "min_return": _min_return,
    "turns": _turns,
    "tokens": _tokens,
    "action_format": _action_format,
    "valid_actions": _valid_actions,
    "charset": _charset,
}
"""Checks by name, in the order they run."""


def make_row_check(cfg: FilterConfig) -> Callable[[Record], tuple[str, str] | None]:
    """`check(record)`: None to keep it, else (filter name, reason) of the first check in
    `FILTERS` it fails. Settings are checked (and a tokenizer loaded) once, here."""
    count = make_token_counter(cfg.tokenizer) if cfg.max_tokens is not None else len
    if cfg.action_regex:
        try:
            re.compile(cfg.action_regex)
        except re.error as e:
            raise ValueError(
                f"filters.action_regex={cfg.action_regex!r} is not a regex: {e}"
            ) from e

    def check(r: Record) -> tuple[str, str] | None:
        for name, fn in FILTERS.items():
            reason = fn(r, cfg, count)
            if reason is not None:
                return name, reason
        return None

    return check
