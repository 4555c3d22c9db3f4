"""Pick a generation backend by name or from a model spec string.

`make_backend("tiny-1m")`, `make_backend("runs/x/checkpoints/step_100")` and
`make_backend("http://127.0.0.1:8000/v1", tokenizer="tiny-1m")` all return
`(backend, tokenizer)`, so rollout code never branches on where the model lives. Each
`kind` has a backend class (`BACKENDS`) and a builder (`BUILDERS`), both registries.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from arborl.generation.base import GenerationBackend
from arborl.generation.hf import HFBackend
from arborl.generation.openai_backend import OpenAIBackend
from arborl.generation.vllm_backend import VLLMBackend
from arborl.registry import Registry

_UNKNOWN = "unknown {what} {name}; known: {known}.{hint}"
BACKENDS: Registry[type] = Registry("generation backend", error=ValueError, message=_UNKNOWN)
"""Backend classes by `kind`."""
BACKENDS.register("hf", HFBackend)
BACKENDS.register("openai", OpenAIBackend)
BACKENDS.register("vllm", VLLMBackend)

BUILDERS: Registry = Registry("generation backend", error=ValueError, message=_UNKNOWN)
"""`kind` -> `build(spec, is_url, opts) -> (backend, tokenizer)`, `opts` being
`make_backend`'s keyword arguments."""


def get_backend_class(name: str) -> type:
    return BACKENDS.get(name)


def make_backend(
    spec: str,
    kind: str | None = None,
    *,
    tokenizer: PreTrainedTokenizerBase | str | None = None,
    model_name: str | None = None,
    api_key: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    seed: int = 0,
    max_batch_size: int = 64,
    **kwargs: Any,
) -> tuple[GenerationBackend, PreTrainedTokenizerBase]:
    """Backend + tokenizer for `spec`: a preset name, a checkpoint dir or an http(s) URL.

    `kind` ("hf", "openai", "vllm") defaults to "openai" for URLs and "hf" otherwise.
    For a URL, `tokenizer` (a tokenizer, or a preset/dir whose tokenizer to load) is
    required since text must be mapped back to token ids, and `model_name` defaults to the
    first model the server lists. Extra `kwargs` go to the backend's constructor.
    """
    is_url = spec.startswith(("http://", "https://"))
    kind = kind or ("openai" if is_url else "hf")
    opts = dict(
        tokenizer=tokenizer,
        model_name=model_name,
        api_key=api_key,
        device=device,
        dtype=dtype,
        seed=seed,
        max_batch_size=max_batch_size,
        kwargs=kwargs,
    )
    return BUILDERS.get(kind)(spec, is_url, opts)


@BUILDERS.register("openai")
def _build_openai(spec: str, is_url: bool, o: dict) -> tuple[Any, Any]:
    from arborl.models import load_tokenizer

    if not is_url:
        raise ValueError(f"backend 'openai' needs an http(s):// URL, got spec={spec!r}")
    tokenizer = o["tokenizer"]
    if tokenizer is None:
        raise ValueError(
            f"make_backend({spec!r}) needs tokenizer= (a tokenizer, preset name or "
            "checkpoint dir) to map the server's text back to token ids"
        )
    if isinstance(tokenizer, str):
        tokenizer = load_tokenizer(tokenizer)
    backend = OpenAIBackend(
        spec,
        o["model_name"] or "",
        tokenizer,
        api_key=o["api_key"],
        max_batch_size=o["max_batch_size"],
        **o["kwargs"],
    )
    if not o["model_name"]:
        backend.model = list_models(backend.base_url, o["api_key"])[0]
    return backend, tokenizer


def _local_only(kind: str, spec: str, is_url: bool) -> None:
    if is_url:
        raise ValueError(f"backend {kind!r} runs a local model; spec={spec!r} is a URL")


@BUILDERS.register("vllm")
def _build_vllm(spec: str, is_url: bool, o: dict) -> tuple[Any, Any]:
    from arborl.models.pretrained import resolve_checkpoint

    _local_only("vllm", spec, is_url)
    backend = VLLMBackend(resolve_checkpoint(spec), seed=o["seed"], dtype=o["dtype"], **o["kwargs"])
    return backend, backend.tokenizer


@BUILDERS.register("hf")
def _build_hf(spec: str, is_url: bool, o: dict) -> tuple[Any, Any]:
    from arborl.models import load_policy

    _local_only("hf", spec, is_url)
    model, tok = load_policy(spec, dtype=o["dtype"], seed=o["seed"])
    model.eval()
    backend = HFBackend(
        model,
        tok,
        device=o["device"],
        max_batch_size=o["max_batch_size"],
        seed=o["seed"],
        **o["kwargs"],
    )
    return backend, tok


def list_models(base_url: str, api_key: str | None = None) -> list[str]:
    """Model ids served at an OpenAI-compatible `base_url` (ending in /v1)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    resp = httpx.get(f"{base_url}/models", headers=headers, timeout=30)
    resp.raise_for_status()
    ids = [m["id"] for m in resp.json()["data"]]
    if not ids:
        raise RuntimeError(f"{base_url}/models lists no models; pass model_name=")
    return ids
