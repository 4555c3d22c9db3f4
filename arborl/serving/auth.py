"""Bearer tokens, key sources, bind checks and request limits (standard library only).

`bearer_ok` is the one token comparison of every arborl server: the scheme is matched
case-insensitively (RFC 7235) and the credential with `hmac.compare_digest`, so its timing
does not leak how much of a guess was right.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Limits:
    """Request limits every server enforces before it parses or allocates anything."""

    max_body_bytes: int = 8 << 20
    """Largest request body in bytes; a larger one gets 413 before it is read whole."""
    max_json_depth: int = 64
    """Deepest nesting of JSON arrays/objects in a body; deeper gets 400 before parsing."""


DEFAULT_LIMITS = Limits()


def bearer_ok(header: str | None, token: str) -> bool:
    """True when `header` is `Bearer <token>` (scheme in any case, one space)."""
    scheme, _, credential = (header or "").rstrip().partition(" ")
    good = hmac.compare_digest(credential.encode(errors="replace"), token.encode())
    return good and scheme.lower() == "bearer" and bool(token)


def resolve_key(
    flag: str | None, env_var: str, file: str | Path | None = None
) -> tuple[str | None, str]:
    """(key, where it came from): `flag`, else `$env_var`, else the first line of `file`.

    A key in a file or the environment stays out of `ps`; a flag does not.
    """
    if flag:
        return flag, "flag"
    if os.environ.get(env_var):
        return os.environ[env_var], f"${env_var}"
    if file:
        path = Path(file)
        try:
            key = path.read_text().strip()
        except OSError as e:
            raise ValueError(f"cannot read the key file {str(path)!r}: {e}") from e
        if not key:
            raise ValueError(f"the key file {str(path)!r} is empty; put the key on its first line")
        return key, str(path)
    return None, "none"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, key: str | None, key_flag: str) -> None:
    """Refuse to serve a non-loopback `host` without a key (raises ValueError with the fix)."""
    if not key and not is_loopback(host):
        raise ValueError(
            f"--host {host} is reachable from other machines but no key is set; give "
            f"{key_flag} (or its environment variable / file), or bind 127.0.0.1. "
            "See docs/security.md"
        )


_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_depth(raw: bytes, stop_at: int | None = None) -> int:
    """Deepest array/object nesting in `raw` (strings skipped), without parsing it.

    Stops counting once `stop_at` is passed, so a hostile body costs one regex scan; a body
    with no more brackets than `stop_at` returns its bracket count (an upper bound).
    """
    brackets = raw.count(b"[") + raw.count(b"{")
    if stop_at is not None and brackets <= stop_at:
        return brackets  # cannot be deeper than the bracket count
    depth = best = 0
    for m in _JSON_TOKENS.finditer(raw):
        tok = m.group()
        if tok in (b"[", b"{"):
            depth += 1
            best = max(best, depth)
            if stop_at is not None and best > stop_at:
                return best
        elif tok in (b"]", b"}"):
            depth -= 1
    return best
