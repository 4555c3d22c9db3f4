"""`arborl serve CHECKPOINT`: an OpenAI-compatible server for a checkpoint or tiny preset.

    arborl serve tiny-1m --port 8000
    curl http://127.0.0.1:8000/v1/completions -d '{"prompt": "hi", "max_tokens": 8}' \
        -H 'Content-Type: application/json'

Binds to 127.0.0.1 unless told otherwise, since the server has no rate limiting. The key
comes from `--api-key`, else `$ARBORL_API_KEY`, else `--api-key-file` (the last two stay out
of `ps`); without one every route is open, which is printed loudly, and a non-loopback
`--host` is refused. See docs/security.md.
"""

from __future__ import annotations

import argparse
import sys

from arborl.config.flags import add_flags, read_flags
from arborl.serving.config import GatewayLimits, ServerConfig

API_KEY_ENV = "ARBORL_API_KEY"
SERVE = ServerConfig(port=8000)
"""`arborl serve`'s server flags and their defaults."""
KEY_FLAGS = {"token": "api-key", "token_file": "api-key-file"}
"""`arborl serve` names its key flags --api-key and --api-key-file."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve a checkpoint over an OpenAI-compatible HTTP API",
        description="Serve a checkpoint directory or tiny preset at /v1/completions, "
        "/v1/chat/completions and /v1/models.",
    )
    p.add_argument("checkpoint", help="HF checkpoint directory or preset name (e.g. tiny-1m)")
    add_flags(p, SERVE, rename=KEY_FLAGS)
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="largest max_tokens a request may ask for (default: the model context)",
    )
    p.add_argument(
        "--max-rows", type=int, default=256, help="largest prompts x n in one request (default 256)"
    )
    p.add_argument(
        "--tool-parser",
        default="hermes",
        help="how generated tool calls are read (a name of arborl.generation.tools."
        "TOOL_PARSERS; default hermes: <tool_call>{json}</tool_call> blocks)",
    )
    p.add_argument(
        "--record",
        default=None,
        metavar="DIR",
        help="run as the recording gateway: every call is recorded token-exactly to "
        "DIR/<session>.jsonl, its session named by the URL (/s/<id>/v1), the "
        "X-Arborl-Session header, metadata.session_id or user (docs/agents.md)",
    )
    add_session_limits(p)
    p.add_argument("--model-name", default=None, help="model id clients use (default: CHECKPOINT)")
    p.add_argument("--max-batch-size", type=int, default=64, help="prompts per forward batch")
    p.add_argument("--seed", type=int, default=0, help="seed for preset init and sampling")
    p.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16"], help="weights dtype"
    )
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    p.set_defaults(func=run)


def add_session_limits(p: argparse.ArgumentParser) -> None:
    """The recording gateway's session limits: one flag per `GatewayLimits` field."""
    group = p.add_argument_group("with --record: the session limits (docs/security.md)")
    add_flags(group, GatewayLimits)


def run(args: argparse.Namespace) -> int:
    from arborl.serving import check_bind, resolve_key

    server = read_flags(SERVE, args, rename=KEY_FLAGS)
    key, _ = resolve_key(server.token, API_KEY_ENV, server.token_file)
    check_bind(server.host, key, "--api-key")
    if not key:
        print(f"WARNING: arborl serve has no API key: every route on {server.host}:{server.port} "
              f"is open to any local user; set ${API_KEY_ENV} or --api-key-file "
              "(docs/security.md)", file=sys.stderr, flush=True)  # fmt: skip
    import uvicorn

    from arborl.generation.registry import make_backend
    from arborl.generation.server import create_app

    backend, tokenizer = make_backend(
        args.checkpoint,
        "hf",
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
        max_batch_size=args.max_batch_size,
    )
    name = args.model_name or args.checkpoint
    if args.record:
        from arborl.generation.gateway import Gateway

        gateway = Gateway(backend, tokenizer, name, api_key=key, limits=gateway_limits(args),
                          auto_sessions=True, record_dir=args.record, open_access=not key,
                          tool_parser=args.tool_parser, max_request_s=server.max_request_s,
                          max_tokens_limit=args.max_tokens, max_rows=args.max_rows)  # fmt: skip
        print(f"recording every call to {args.record}/<session>.jsonl", file=sys.stderr)
        uvicorn.run(gateway.app, host=server.host, port=server.port, log_level="info")
        return 0
    app = create_app(backend, tokenizer, name, api_key=key,
                     max_tokens_limit=args.max_tokens, max_rows=args.max_rows,
                     max_request_s=server.max_request_s, tool_parser=args.tool_parser)  # fmt: skip
    uvicorn.run(app, host=server.host, port=server.port, log_level="info")
    return 0


def gateway_limits(args: argparse.Namespace) -> GatewayLimits:
    """The `GatewayLimits` of `--record` from the flags (their defaults are its defaults)."""
    return read_flags(GatewayLimits, args)
