"""Outcome and process reward models: a causal-LM backbone with a scalar head.

One class serves both kinds. The model reads a trajectory rendered as a chat (the env's
observations as user turns, the agent's responses as assistant turns) and gives a scalar
at every token; the score of step t is the scalar at the last token of step t's response.
An outcome RM (`kind="orm"`) is trained on the last step's score only, with the
Bradley-Terry loss over preference pairs; a process RM (`kind="prm"`) is trained on every
step's score against Monte-Carlo success rates. Either can score any prefix, which is what
search needs (the score of a partial trajectory).

The network is a Hugging Face `AutoModelForSequenceClassification` with one label, so a
saved reward model is a plain HF checkpoint (`LlamaForSequenceClassification` etc.) that
TRL or any HF tool loads as is; arborl's own settings (kind, context length) sit beside it
in `arborl_rm.json`. It starts from a tiny preset, from any causal-LM checkpoint
(including the SFT policy: its body is reused, the LM head dropped, a fresh scalar head
added) or from a saved reward model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerBase

from arborl.data.trajectory import Trajectory
from arborl.models.loading import MODEL_PRESETS, load_tokenizer, resolve_dtype, seeded
from arborl.models.scoring import position_ids_from_mask
from arborl.serving.cancel import cancel_point

RM_CONFIG_FILE = "arborl_rm.json"
"""arborl's settings of a saved reward model, next to the HF files."""
KINDS = ("orm", "prm")
"""Reward model kinds: outcome (one score per trajectory) and process (one per step)."""


# --- losses (pure) --------------------------------------------------------------------------
def bradley_terry_loss(
    chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean of -log sigmoid(chosen - rejected - margin) over pairs.

    chosen, rejected: (B,) scores of the preferred and the other trajectory; margin: (B,)
    or None, how much higher the chosen score should be (Llama-2-style margin loss).
    """
    diff = chosen.float() - rejected.float()  # (B,)
    if margin is not None:
        diff = diff - margin.float()
    return -F.logsigmoid(diff).mean()


def step_label_loss(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of sigmoid(scores) against soft step labels, masked mean.

    scores, labels, mask: (B, S); labels in [0, 1] (Monte-Carlo success rates), mask 1 on
    real steps. Soft targets make sigmoid(score) an estimate of the success rate.
    """
    mask = mask.float()
    bce = F.binary_cross_entropy_with_logits(scores.float(), labels.float(), reduction="none")
    return (bce * mask).sum() / mask.sum().clamp(min=1.0)


# --- rendering ------------------------------------------------------------------------------
FINAL_OBSERVATION = "final_observation"
"""`Trajectory.meta` key of the observation after the last step, when known (search nodes
set it); the last step is then scored after seeing it, like every other step."""


def trajectory_messages(
    traj: Trajectory, include_instruction: bool = True, first_step: int = 0
) -> list[dict[str, str]]:
    """Steps `first_step`.. of `traj` as chat messages.

    Each step is a user message (the observation the agent acted in) and an assistant
    message (its raw response, else the action); `meta['final_observation']`, if set, is
    a last user message. Only what the agent saw and said is shown: no rewards and no
    info keys, so the model cannot read the outcome off a flag.
    """
    messages = []
    if include_instruction and traj.instruction:
        messages.append({"role": "system", "content": traj.instruction})
    for s in traj.steps[first_step:]:
        messages.append({"role": "user", "content": s.observation})
        response = s.response if s.response is not None else s.action
        messages.append({"role": "assistant", "content": response})
    final = traj.meta.get(FINAL_OBSERVATION)
    if final is not None:
        messages.append({"role": "user", "content": str(final)})
    return messages


@dataclass
class EncodedTrajectory:
    """Token ids of one rendered trajectory and where each step is scored."""

    ids: list[int]
    """Token ids (left-truncated to the model's context)."""
    step_ends: list[int]
    """Per step, the index in `ids` where its score is read; -1 if not in the context."""


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def encode_trajectory(
    tokenizer: PreTrainedTokenizerBase,
    traj: Trajectory,
    max_length: int,
    include_instruction: bool = True,
    max_history_steps: int | None = None,
    score_after_observation: bool = True,
) -> EncodedTrajectory:
    """Render and tokenize `traj` (its last `max_history_steps` steps, all by default) and
    keep the last `max_length` tokens.

    Step t is scored at the last token of the observation that follows it, when there is
    one (`score_after_observation`): the score then judges the state the step led to, as a
    value function would. Otherwise (the last step without `final_observation`) it is read
    at the last token of the step's response. Positions come from tokenizing each prefix
    of the chat (chat templates render a prefix of messages as a prefix of the text).
    """
    if not traj.steps:
        raise ValueError(f"trajectory of task {traj.task_id!r} has no steps; nothing to score")
    num = traj.num_steps
    first = max(0, num - max_history_steps) if max_history_steps else 0
    messages = trajectory_messages(traj, include_instruction, first)
    ids = _render(tokenizer, messages)
    head = 1 if include_instruction and traj.instruction else 0
    cut = max(0, len(ids) - max_length)
    # Prefix ends grow with t, so walk back from the last step and stop at the first one
    # the cut drops: only steps inside the kept window are rendered (a 2,000-step episode
    # under a 512-token window renders a few dozen prefixes, not 2,000 of them).
    ends = [-1] * num
    for t in range(num - 1, first - 1, -1):
        last = head + 2 * (t - first) + 1  # index of step t's assistant message
        if score_after_observation and last + 1 < len(messages):
            last += 1  # the next observation (a user message)
        end = len(_render(tokenizer, messages[: last + 1])) - 1
        if end < cut:
            break  # this step and every earlier one lie before the window
        ends[t] = end - cut
    return EncodedTrajectory(ids[cut:], ends)


def step_prefixes(traj: Trajectory) -> list[Trajectory]:
    """One trajectory per step t: steps 0..t, with step t+1's observation (or the
    trajectory's own final observation) as `final_observation`, so each is scored at t."""
    out = []
    for t in range(traj.num_steps):
        nxt = traj.steps[t + 1].observation if t + 1 < traj.num_steps else None
        final = nxt if nxt is not None else traj.meta.get(FINAL_OBSERVATION)
        meta = {} if final is None else {FINAL_OBSERVATION: final}
        out.append(replace(traj, steps=traj.steps[: t + 1], meta=meta))
    return out


def collate(
    encoded: Sequence[EncodedTrajectory], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad to (B, T) ids and mask; (B, S) step-end columns (-1 where absent).

    Left padding puts every sequence's last token in column T-1, so the final score of
    every row is `scores[:, -1]`.
    """
    width = max(len(e.ids) for e in encoded)
    num_steps = max(len(e.step_ends) for e in encoded)
    ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    ends = torch.full((len(encoded), num_steps), -1, dtype=torch.long)
    for i, e in enumerate(encoded):
        off = width - len(e.ids)
        ids[i, off:] = torch.tensor(e.ids, dtype=torch.long)
        mask[i, off:] = 1
        ends[i, : len(e.step_ends)] = torch.tensor(
            [p + off if p >= 0 else -1 for p in e.step_ends], dtype=torch.long
        )
    return ids, mask, ends


def gather_steps(scores: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) per-token scores and (B, S) step-end columns -> (B, S) step scores, (B, S) mask."""
    valid = ends >= 0
    picked = scores.gather(1, ends.clamp(min=0))  # (B, S)
    return torch.where(valid, picked, torch.zeros_like(picked)), valid


# --- the model ------------------------------------------------------------------------------
class RewardModel(nn.Module):
    """(B, T) ids -> (B, T) scalar scores; plus the tokenizer and settings to render text."""

    def __init__(
        self,
        net: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        kind: str = "orm",
        max_length: int = 512,
        include_instruction: bool = True,
        max_history_steps: int | None = None,
        score_after_observation: bool = True,
    ) -> None:
        super().__init__()
        if max_history_steps is not None and max_history_steps < 1:
            raise ValueError(f"max_history_steps={max_history_steps} must be >= 1 or None (all)")
        if kind not in KINDS:
            raise ValueError(f"reward model kind={kind!r} is not one of {KINDS}")
        if max_length < 8:
            raise ValueError(f"max_length={max_length} is too short; use at least 8 tokens")
        for attr in ("score", "base_model_prefix"):
            if not hasattr(net, attr):
                raise TypeError(
                    f"{type(net).__name__} has no `{attr}`; a reward model needs an HF "
                    "*ForSequenceClassification model (Llama, Qwen2, Mistral, GPT-2, ...)"
                )
        self.net, self.tokenizer, self.kind = net, tokenizer, kind
        limit = getattr(net.config, "max_position_embeddings", None) or max_length
        self.max_length = int(min(max_length, limit))
        self.include_instruction = bool(include_instruction)
        self.max_history_steps = max_history_steps
        self.score_after_observation = bool(score_after_observation)

    @classmethod
    def from_spec(
        cls,
        name_or_path: str,
        kind: str = "orm",
        max_length: int = 512,
        include_instruction: bool = True,
        dtype: str = "float32",
        seed: int = 0,
        max_history_steps: int | None = None,
        score_after_observation: bool = True,
    ) -> RewardModel:
        """A reward model from a tiny preset (seeded fresh weights), a causal-LM checkpoint
        directory (its body, a fresh head) or a saved reward model (as saved; the other
        arguments are then ignored)."""
        path = Path(name_or_path)
        if name_or_path not in MODEL_PRESETS and (path / RM_CONFIG_FILE).exists():
            return cls.from_pretrained(path, dtype=dtype)
        tokenizer = load_tokenizer(name_or_path)
        with seeded(seed):  # the new head's init draws from the global RNG
            if name_or_path in MODEL_PRESETS:
                config = MODEL_PRESETS[name_or_path].to_config(tokenizer)
                config.num_labels = 1
                net = AutoModelForSequenceClassification.from_config(
                    config, dtype=resolve_dtype(dtype), attn_implementation="sdpa"
                )
            else:
                net = AutoModelForSequenceClassification.from_pretrained(
                    path, num_labels=1, dtype=resolve_dtype(dtype)
                )
        net.config.pad_token_id = tokenizer.pad_token_id
        return cls(net, tokenizer, kind, max_length, include_instruction, max_history_steps,
                   score_after_observation)  # fmt: skip

    @classmethod
    def from_pretrained(cls, directory: str | Path, dtype: str = "float32") -> RewardModel:
        """Load a reward model written by `save_pretrained`."""
        directory = Path(directory)
        cfg_file = directory / RM_CONFIG_FILE
        if not cfg_file.exists():
            raise FileNotFoundError(
                f"{directory} has no {RM_CONFIG_FILE}, so it is not a saved arborl reward "
                "model; train one with `arborl rm train` or start from it with from_spec()"
            )
        settings = json.loads(cfg_file.read_text())
        net = AutoModelForSequenceClassification.from_pretrained(
            directory, dtype=resolve_dtype(dtype)
        )
        tokenizer = load_tokenizer(str(directory))
        return cls(
            net,
            tokenizer,
            settings["kind"],
            settings["max_length"],
            settings.get("include_instruction", True),
            settings.get("max_history_steps"),
            settings.get("score_after_observation", True),
        )

    def settings(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "max_length": self.max_length,
            "include_instruction": self.include_instruction,
            "max_history_steps": self.max_history_steps,
            "score_after_observation": self.score_after_observation,
        }

    def save_pretrained(self, directory: str | Path, extra: dict | None = None) -> Path:
        """HF files (config, weights, tokenizer) plus `arborl_rm.json` (kind, context)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.net.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        settings = {**self.settings(), **(extra or {})}
        (directory / RM_CONFIG_FILE).write_text(json.dumps(settings, indent=2))
        return directory

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) ids and mask -> (B, T) float32 score of each prefix (left padding ok)."""
        body = getattr(self.net, self.net.base_model_prefix)
        hidden = body(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        ).last_hidden_state  # (B, T, H)
        return self.net.score(hidden).squeeze(-1).float()  # (B, T)

    def encode(self, trajectories: Sequence[Trajectory]) -> list[EncodedTrajectory]:
        out = []
        for t in trajectories:
            cancel_point()  # rendering 1000 trajectories takes seconds: `rm serve` may stop
            out.append(encode_trajectory(self.tokenizer, t, self.max_length,
                                         self.include_instruction, self.max_history_steps,
                                         self.score_after_observation))  # fmt: skip
        return out

    def step_scores(
        self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Collated (ids, mask, ends) -> (B, S) step scores and their (B, S) mask."""
        ids, mask, ends = batch
        return gather_steps(self(ids, mask), ends)

    @torch.no_grad()
    def _final_scores(self, encoded: list[EncodedTrajectory], batch_size: int) -> list[list[float]]:
        """Per encoded sequence, the score at each of its step positions (NaN if absent).
        Batched, longest first so that rows of a batch pad little."""
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        was_training = self.training
        self.eval()
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i].ids))
        out: list[list[float]] = [[] for _ in encoded]
        try:
            for start in range(0, len(order), batch_size):
                cancel_point()  # `rm serve`: a request whose client left, or over its time
                rows = order[start : start + batch_size]
                batch = collate([encoded[i] for i in rows], self.tokenizer.pad_token_id)
                scores, valid = self.step_scores(batch)
                for r, i in enumerate(rows):
                    n = len(encoded[i].step_ends)
                    vals = torch.where(valid[r, :n], scores[r, :n], torch.nan)
                    out[i] = [float(v) for v in vals]
        finally:
            self.train(was_training)
        return out

    def score_steps(
        self, trajectories: Sequence[Trajectory], batch_size: int = 32
    ) -> list[list[float]]:
        """Per trajectory, the raw score after each of its steps (NaN for steps cut off by
        the context). With `max_history_steps`, every step is scored from its own prefix
        (one sequence per step, its last `max_history_steps` steps shown); otherwise one
        sequence per trajectory gives all its steps' scores."""
        if not self.max_history_steps:
            return self._final_scores(self.encode(trajectories), batch_size)
        prefixes = [step_prefixes(t) for t in trajectories]
        flat = self._final_scores(self.encode([q for ps in prefixes for q in ps]), batch_size)
        out, k = [], 0
        for ps in prefixes:
            out.append([flat[k + i][-1] for i in range(len(ps))])
            k += len(ps)
        return out

    def score(self, trajectories: Sequence[Trajectory], batch_size: int = 32) -> list[float]:
        """The raw score of each (possibly partial) trajectory: its last step's score."""
        return [s[-1] for s in self._final_scores(self.encode(trajectories), batch_size)]
