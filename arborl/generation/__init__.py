"""Generation backends behind one interface: token ids in, token ids + logprobs out."""

from arborl.generation.base import Completion, GenerationBackend, SamplingParams
from arborl.generation.hf import HFBackend, sample_next
from arborl.generation.openai_backend import HTTPCompletion, OpenAIBackend
from arborl.generation.registry import BACKENDS, get_backend_class, list_models, make_backend
from arborl.generation.vllm_backend import VLLMBackend

__all__ = [
    "BACKENDS",
    "Completion",
    "GenerationBackend",
    "HFBackend",
    "HTTPCompletion",
    "OpenAIBackend",
    "SamplingParams",
    "VLLMBackend",
    "get_backend_class",
    "list_models",
    "make_backend",
    "sample_next",
]
