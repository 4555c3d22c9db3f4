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

API_KEY_ENV = "ARBORL_API_KEY"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve a checkpoint over an OpenAI-compatible HTTP API",
        description="Serve a checkpoint directory or tiny preset at /v1/completions, "
        "/v1/chat/completions and /v1/models.",
    )
    p.add_argument("checkpoint", help="HF checkpoint directory or preset name (e.g. tiny-1m)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' "
                   f"(default ${API_KEY_ENV}, else --api-key-file; a flag shows in ps)")  # fmt: skip
    p.add_argument("--api-key-file", default=None, help="read the API key from this file")
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
        "--max-request-s",
        type=float,
        default=300.0,
        help="longest time one request may hold the model, in seconds; past it the client "
        "gets 504 (default 300; 0: no limit). Requests take the model in arrival order",
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
    """The recording gateway's session limits (`GatewayLimits`; docs/security.md)."""
    p.add_argument(
        "--session-timeout-s",
        type=float,
        default=600.0,
        help="with --record: a session closes this long after it opened (default 600)",
    )
    p.add_argument(
        "--idle-timeout-s",
        type=float,
        default=300.0,
        help="with --record: a session closes this long after its last call (default 300)",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=1024,
        help="with --record: sessions open at once (default 1024); one more closes the least "
        "recently used idle session, whose records are on disk already",
    )
    p.add_argument(
        "--max-calls-per-session",
        type=int,
        default=256,
        help="with --record: calls one session may make; past it 429 (default 256)",
    )
    p.add_argument(
        "--max-pending",
        type=int,
        default=64,
        help="with --record: calls in flight over all sessions; past it 503 (default 64)",
    )


def run(args: argparse.Namespace) -> int:
    from arborl.serving import check_bind, resolve_key

    key, _ = resolve_key(args.api_key, API_KEY_ENV, args.api_key_file)
    check_bind(args.host, key, "--api-key")
    if not key:
        print(f"WARNING: arborl serve has no API key: every route on {args.host}:{args.port} "
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
                          tool_parser=args.tool_parser, max_request_s=args.max_request_s,
                          max_tokens_limit=args.max_tokens, max_rows=args.max_rows)  # fmt: skip
        print(f"recording every call to {args.record}/<session>.jsonl", file=sys.stderr)
        uvicorn.run(gateway.app, host=args.host, port=args.port, log_level="info")
        return 0
    app = create_app(backend, tokenizer, name, api_key=key,
                     max_tokens_limit=args.max_tokens, max_rows=args.max_rows,
                     max_request_s=args.max_request_s, tool_parser=args.tool_parser)  # fmt: skip
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def gateway_limits(args: argparse.Namespace):
    """The `GatewayLimits` of `--record` from the flags (their defaults are its defaults)."""
    from arborl.generation.gateway import GatewayLimits

    return GatewayLimits(
        max_sessions=args.max_sessions,
        max_calls_per_session=args.max_calls_per_session,
        max_pending=args.max_pending,
        session_timeout_s=args.session_timeout_s,
        idle_timeout_s=args.idle_timeout_s,
    )
