"""Where a step's time and model tokens go: named phases, recorded only while profiled.

Library code marks its parts with `with phase("env"):` (the rollout's env calls, prompt
building, generation or scoring; the trainer's `PhaseTimer` phases: rollout, ref_logp,
update, ...). Outside a `Profile` a mark is one global read, so the marks stay in the
library for good. Inside one (`with Profile() as prof:`), every moment is charged to the
innermost open phase (exclusive time), so the phases' seconds add up to the profile's
wall exactly: time no phase covers goes to `OUTSIDE`.

`watch_model(model)` adds forward hooks that count, into the open phase, the positions
the model's decoder ran (padded, as the matrix products see them, and real, by the
attention mask) and the positions its LM head ran (`logits_to_keep` runs it on fewer).
`bench/pretrained_step.py` turns those counts into FLOPs and a fraction of the GEMM rate.

    prof = Profile()
    handles = watch_model(model)
    with prof:
        trainer.rl_step()
    prof.seconds["env"], prof.tokens["update"]["positions"]
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

OUTSIDE = "(outside)"
"""The bucket of a profile's time with no phase open."""

_active: Profile | None = None


class Profile:
    """Exclusive seconds and token counts per phase while active (not re-entrant; one at
    a time per process)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        """Phase -> seconds charged to it while it was the innermost open phase."""
        self.tokens: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        """Phase -> {"positions", "real", "head", "forwards"}: decoder positions run
        (padding included), real ones (attention mask), LM-head positions, forward calls."""
        self.wall = 0.0
        """Seconds between `__enter__` and `__exit__`."""
        self._stack: list[str] = []
        self._last = 0.0
        self._start = 0.0

    def __enter__(self) -> Profile:
        global _active
        if _active is not None:
            raise RuntimeError("a Profile is already active in this process; end it first")
        self._start = self._last = time.perf_counter()
        _active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        global _active
        self._charge()
        self.wall += self._last - self._start
        _active = None

    def _charge(self) -> None:
        now = time.perf_counter()
        self.seconds[self._stack[-1] if self._stack else OUTSIDE] += now - self._last
        self._last = now

    def current(self) -> str:
        """The innermost open phase (`OUTSIDE` when none)."""
        return self._stack[-1] if self._stack else OUTSIDE


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Charge the block's time (less its inner phases') to `name` in the active profile."""
    prof = _active
    if prof is None:
        yield
        return
    prof._charge()
    prof._stack.append(name)
    try:
        yield
    finally:
        prof._charge()
        prof._stack.pop()


def active() -> Profile | None:
    """The profile now recording, if any."""
    return _active


def _count_decoder(module, args, kwargs) -> None:
    prof = _active
    if prof is None:
        return
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:  # called with inputs_embeds: count their positions
        ids = kwargs["inputs_embeds"][..., 0]
    positions = ids.numel()
    mask = kwargs.get("attention_mask")
    # a 2-D mask covers the cached positions too: the last columns are this call's
    real = (
        int(mask[:, -ids.shape[-1] :].sum()) if mask is not None and mask.dim() == 2 else positions
    )
    counts = prof.tokens[prof.current()]
    counts["positions"] += positions
    counts["real"] += real
    counts["forwards"] += 1


def _count_head(module, args) -> None:
    prof = _active
    if prof is not None:
        prof.tokens[prof.current()]["head"] += args[0].shape[:-1].numel()


def watch_model(model) -> list:
    """Forward hooks on `model` (an HF causal LM, LoRA-wrapped or not) that count its
    positions into the active profile's open phase; returns the handles (`.remove()`)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = inner.get_output_embeddings()
    return [
        inner.register_forward_pre_hook(_count_decoder, with_kwargs=True),
        head.register_forward_pre_hook(_count_head),
    ]
