"""`arborl serve CHECKPOINT`: an OpenAI-compatible server for a checkpoint or tiny preset.

    arborl serve tiny-1m --port 8000
    curl http://127.0.0.1:8000/v1/completions -d '{"prompt": "hi", "max_tokens": 8}' \
        -H 'Content-Type: application/json'

Binds to 127.0.0.1 unless told otherwise, since the server has no rate limiting.
"""

from __future__ import annotations

import argparse


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
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--model-name", default=None, help="model id clients use (default: CHECKPOINT)")
    p.add_argument("--max-batch-size", type=int, default=64, help="prompts per forward batch")
    p.add_argument("--seed", type=int, default=0, help="seed for preset init and sampling")
    p.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16"], help="weights dtype"
    )
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
    app = create_app(backend, tokenizer, args.model_name or args.checkpoint, api_key=args.api_key)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
