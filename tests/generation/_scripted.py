"""A `GenerationBackend` that replies with scripted text, so tests can make a "model" call
tools (a random tiny model never does) and still go through the real server, template,
token ids and logprobs. Each reply is encoded with the tokenizer, the end-of-turn token
appended, every token given logprob -0.25."""

from __future__ import annotations

from collections.abc import Callable

from arborl.generation.base import Completion, SamplingParams

LOGP = -0.25


class ScriptedBackend:
    """Replies `script(prompt_text, call_index)`; remembers every prompt it was given."""

    def __init__(self, tokenizer, script: Callable[[str, int], str], max_length: int = 4096):
        self.tokenizer, self.script, self.max_length = tokenizer, script, max_length
        self.prompts: list[str] = []

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        out = []
        for ids in prompts:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            self.prompts.append(text)
            reply = self.script(text, len(self.prompts) - 1)
            tok = self.tokenizer.encode(reply, add_special_tokens=False)
            tok = tok[: params.max_new_tokens - 1] + [self.tokenizer.eos_token_id]
            out.append(Completion(tok, [LOGP] * len(tok), reply, "stop"))
        return out
