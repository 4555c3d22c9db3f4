"""The auth, limits and error layer shared by arborl's three HTTP servers.

The env server (`arborl env serve`), the model server (`arborl serve`) and the reward-model
server (`arborl rm serve`) all wrap their app in `Guard` (bearer token checked in constant
time before any body is read, body size and JSON depth bounded, `/health` the only open
route, so `/docs` and `/openapi.json` need the token too) and take their keys from
`resolve_key` (flag, then environment variable, then file) and their bind check from
`check_bind` (no non-loopback host without a key). The model servers also share
`arborl.serving.cancel`: requests take the model in turn, for at most `max_request_s`
each, and stop when their client disconnects. Their shared settings, and so their shared
flags, are `arborl.serving.config.ServerConfig`. Standard library only, so it sits low in
the layering and every server may import it; see docs/security.md.
"""

from arborl.serving.auth import (
    DEFAULT_LIMITS,
    Limits,
    bearer_ok,
    check_bind,
    is_loopback,
    json_depth,
    resolve_key,
)
from arborl.serving.cancel import Cancelled, ModelQueue, cancel_point, run_request
from arborl.serving.config import GatewayLimits, ServerConfig
from arborl.serving.guard import Guard, install_handlers, openai_error

__all__ = [
    "Cancelled",
    "DEFAULT_LIMITS",
    "GatewayLimits",
    "Guard",
    "install_handlers",
    "Limits",
    "ModelQueue",
    "ServerConfig",
    "bearer_ok",
    "cancel_point",
    "check_bind",
    "is_loopback",
    "json_depth",
    "openai_error",
    "resolve_key",
    "run_request",
]
