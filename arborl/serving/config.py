"""The settings arborl's HTTP servers share, declared once: `ServerConfig` (where a server
listens, who may call it, how long one request may hold the model) and `GatewayLimits`
(what the recording gateway holds at once). `arborl serve`, `arborl rm serve` and
`arborl env serve` generate their flags from these fields (`arborl.config.flags`), so a
flag's help is the field's docstring. Standard library only: building a parser must not
import torch or the web stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ServerConfig:
    """Where one of arborl's HTTP servers listens and who may call it (docs/security.md)."""

    host: str = "127.0.0.1"
    """Interface to bind. Loopback unless told otherwise; another address (0.0.0.0)
    exposes the server to the network, and `arborl serve` refuses one without a key."""
    port: int = field(default=8000, metadata={"min": 0, "max": 65535})
    """TCP port (0: a free port); `arborl env serve --replicas N` uses PORT..PORT+N-1."""
    token: str | None = None
    """Bearer token clients must send ('Authorization: Bearer TOKEN'); a flag shows in
    `ps`. Default: the environment variable ($ARBORL_API_KEY for `arborl serve`,
    $ARBORL_TOKEN for `rm serve` and `env serve`), else the token file where the command
    takes one; with none,
    `arborl serve` runs open (loopback only) and the others generate one and print it."""
    token_file: str | None = None
    """Read the bearer token from this file (it stays out of `ps`)."""
    max_request_s: float = field(default=300.0, metadata={"min": 0.0})
    """Longest time one request may hold the model, in seconds; past it the client gets
    504 (0: no limit). Requests take the model in arrival order."""


@dataclass(frozen=True)
class GatewayLimits:
    """What one gateway will hold at once, and for how long (each refusal names its field)."""

    max_sessions: int = 1024
    """Sessions open at once. Standalone (`auto_sessions`) one more closes the least recently
    used session with no call in flight and no key (its records are on disk already; a
    later call naming it opens it again); in training it is refused (503)."""
    max_calls_per_session: int = 256
    """Calls one session may make; past it 429 (an agent stuck in a loop ends there)."""
    max_pending: int = 64
    """Calls in flight (waiting for the model or generating) over all sessions; past it 503."""
    session_timeout_s: float = 600.0
    """A session closes this long after it opened (a caller's `timeout_s` may set less)."""
    idle_timeout_s: float = 300.0
    """A session closes this long after its last call (or its opening)."""

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:  # NaN too
                raise ValueError(
                    f"GatewayLimits.{name}={value} must be > 0 (`arborl serve "
                    f"--{name.replace('_', '-')}`)"
                )
