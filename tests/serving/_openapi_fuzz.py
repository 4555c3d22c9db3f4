"""Hypothesis strategies from an OpenAPI 3.1 schema, and a real uvicorn server in a thread.

`operations(spec)` lists (method, path, body schema); `value_for(schema, spec)` draws a
value that fits the schema exactly (refs, anyOf, ranges) half the time, so requests reach
the work, and otherwise one with noise at every level (hostile numbers, NaN, lone
surrogates, wrong types), since a server must give 4xx for those. Free
objects get keys from `HINT_KEYS`, the fields arborl's servers read, so the fuzz reaches
past the first type check.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

HINT_KEYS = ["task_id", "env_id", "steps", "observation", "action", "meta", "seed", "options",
             "kwargs", "snapshot", "split", "size", "won", "instruction", "prompt", "messages",
             "role", "content", "max_tokens", "n", "stop"]  # fmt: skip
HOSTILE = st.sampled_from([0, -1, 2**31, 10**12, -(10**18), float("nan"), float("inf"),
                           "", "\ud800", "x" * 2000, None, True, [], {}])  # fmt: skip
SCALARS = st.one_of(st.integers(-(2**40), 2**40), st.floats(), st.text(max_size=20),
                    st.booleans(), st.none(), HOSTILE)  # fmt: skip
SAFE = st.one_of(st.integers(0, 9), st.text(max_size=8), st.booleans())
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(HINT_KEYS), st.text(max_size=6)), inner, max_size=4),
), max_leaves=12)  # fmt: skip


def operations(spec: dict, bodies: dict | None = None) -> list[tuple[str, str, dict | None]]:
    """(METHOD, path, request-body schema or None) for every operation in `spec`; `bodies`
    gives a schema where the server reads its body by hand (the env server) or refines
    a free object (a trajectory record)."""
    out = []
    for path, ops in sorted(spec["paths"].items()):
        for method, op in sorted(ops.items()):
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            out.append((method.upper(), path, (bodies or {}).get(path, body.get("schema"))))
    return out


def _resolve(schema: dict, spec: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = spec["components"]["schemas"][name]
    return schema


def value_for(schema: dict | None, spec: dict) -> st.SearchStrategy:
    """Half the draws fit `schema` exactly (so they reach the work), half carry noise."""
    return st.one_of(_draw(schema, spec, 0, noise=False), _draw(schema, spec, 0, noise=True))


def _draw(schema: dict | None, spec: dict, depth: int, noise: bool) -> st.SearchStrategy:
    """A strategy for `schema` (None: any JSON); with `noise`, also values that do not fit."""
    if schema is None or depth > 8:
        return JSON if noise or schema is None else st.none()
    schema = _resolve(schema, spec)
    options = [s for key in ("anyOf", "oneOf") for s in schema.get(key, [])]
    if options:
        return st.one_of([_draw(s, spec, depth + 1, noise) for s in options])
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        props = {k: _draw(v, spec, depth + 1, noise) for k, v in schema["properties"].items()}
        required = {k: props.pop(k) for k in schema.get("required", []) if k in props}
        fitting = st.fixed_dictionaries(required, optional=props)
    elif kind == "object":
        fitting = st.dictionaries(st.sampled_from(HINT_KEYS), JSON if noise else SAFE, max_size=4)
    elif kind == "array":
        item = _draw(schema.get("items"), spec, depth + 1, noise)
        fitting = st.lists(item, min_size=schema.get("minItems", 0), max_size=4)
    elif kind == "integer":
        lo = int(schema.get("minimum", 0))
        hi = int(schema.get("maximum", lo + 16))
        fitting = st.integers(lo, min(hi, lo + 16))
        if noise:
            fitting = st.one_of(st.integers(lo - 1, hi + 1), st.integers(-(10**9), 10**9))
    elif kind == "number":
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -10.0))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 10.0))
        fitting = st.floats(float(lo), float(hi), exclude_min="exclusiveMinimum" in schema)
        if noise:
            fitting = st.one_of(fitting, st.floats())
    elif kind == "string":
        fitting = st.text(max_size=30)
    elif kind == "boolean":
        fitting = st.booleans()
    elif kind == "null":
        fitting = st.none()
    else:
        fitting = JSON
    return st.one_of(fitting, HOSTILE, JSON) if noise else fitting


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Run `app` with uvicorn on a free 127.0.0.1 port; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start within 30 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
