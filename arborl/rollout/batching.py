"""Episodes -> training `Batch`, in one of two views.

step view (one row per turn, R rows), the layout verl-style trainers expect:
  input_ids       (R, P+A) long   prompt left-padded to P, then response right-padded to A
  attention_mask  (R, P+A) long   1 on real tokens
  response_mask   (R, A)   float  1 on generated tokens (incl. the end token), 0 on padding
  old_logp        (R, A)   float  sampling logprob of each generated token (0 on padding)
  step_reward     (R,)     float  the env's reward for this turn
  episode_return  (R,)     float  undiscounted return of the whole episode
  won             (R,)     bool   the episode ended in success
  meta: traj_id, step, group_id, task_id, anchor, valid_action, format_ok, done, truncated,
        terminated, potential, next_potential (the env's shaping potential before/after the
        step, NaN when it gives none), finish_reason, prompt_truncated, response_text, action
  info: view, prompt_length (P), response_length (A), pad_token_id, scored_choices (bool)
  So `input_ids[:, P:]` is the response and `token_logprobs(...)[:, P-1:]` scores it.

  score mode (`agent.action_mode=score`): a row is one choice among K candidates, trained
  as one "token" whose log-probability is the chosen candidate's under the categorical
  (`arborl.models.candidates`); A = 1, and `CHOICE_KEYS` hold what recomputes it:
  input_ids       (R, P+1) long   the prompt, then the chosen candidate's first token
  response_mask   (R, 1)   float  1
  old_logp        (R, 1)   float  the chosen candidate's categorical logprob
  cand_ids        (R, K, L) long  every candidate's response tokens, right-padded
  cand_mask       (R, K, L) long  1 on real tokens (a slot of a row with < K candidates: 0)
  cand_norm       (R, K)   float  each candidate's score divisor (`agent.score_norm`)
  chosen          (R,)     long   index of the chosen candidate
  teacher_p       (R, K)   float  a teacher's probabilities over the candidates (only when
                                  a teacher labelled every turn: `arborl.train.distill`)

episode view (one row per episode, E rows), the growing sequence exactly as generated:
  input_ids       (E, L) long   right-padded
  attention_mask  (E, L) long
  loss_mask       (E, L) float  1 exactly on generated tokens
  old_logp        (E, L) float  aligned to tokens (0 where not generated)
  token_reward    (E, L) float  each turn's reward on that turn's last generated token
  turn_index      (E, L) long   turn each token belongs to (-1 on padding)
  episode_return  (E,)   float;  won (E,) bool
  meta: traj_id, group_id, task_id, num_turns, truncated, truncation_reason, anchors, step_rewards
  Scoring: `token_logprobs(...)[:, t-1]` is the logprob of token t, so compare it with
  `old_logp[:, 1:]` under `loss_mask[:, 1:]`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from arborl.data.batch import Batch
from arborl.rollout.episode import EpisodeState, TurnRecord

CHOICE_KEYS = ("cand_ids", "cand_mask", "cand_norm", "chosen")
"""The score-mode columns from which the update recomputes each row's categorical."""


def holds_choices(batch: Batch) -> bool:
    """Are `batch`'s rows scored choices (`CHOICE_KEYS`)? `build_step_batch` declares it in
    `info["scored_choices"]`; the update, the engines and the merge of worker batches ask
    this rather than guess from which columns happen to be present."""
    return bool(batch.info.get("scored_choices", False))


def build_batch(episodes: list[EpisodeState], view: str, pad_token_id: int) -> Batch:
    """The training Batch of `episodes` in `view` ("step" or "episode")."""
    builders = {"step": build_step_batch, "episode": build_episode_batch}
    if view not in builders:
        raise ValueError(f"view={view!r} is not one of {sorted(builders)}")
    return builders[view](episodes, pad_token_id)


def build_step_batch(episodes: list[EpisodeState], pad_token_id: int) -> Batch:
    rows = [(ep, i, t) for ep in episodes for i, t in enumerate(ep.turns)]
    for ep, i, t in rows:
        if t.prompt_ids is None or t.response_ids is None:
            raise ValueError(
                f"episode {ep.traj_id} turn {i} has no token ids; only LM policies give a batch"
            )
    num_rows = len(rows)
    scored = sum(t.choice is not None for _, _, t in rows)
    if scored not in (0, num_rows):
        raise ValueError(
            f"{scored} of {num_rows} turns were scored choices and the rest generated; one "
            "batch holds one agent.action_mode"
        )
    responses = [_response(t) for _, _, t in rows]
    p_len = max((len(t.prompt_ids) for _, _, t in rows), default=0)
    a_len = max((len(r) for r, _ in responses), default=0)
    # Rows are laid out as Python lists and converted once per tensor: a few tensor ops
    # per row cost more than the whole conversion (an RL step has ~1,500 rows).
    ids, mask, resp_mask, logp = [], [], [], []
    for (_, _, t), (response, logprobs) in zip(rows, responses):
        p, a = len(t.prompt_ids), len(response)
        ids.append([pad_token_id] * (p_len - p) + [*t.prompt_ids, *response])
        ids[-1] += [pad_token_id] * (a_len - a)
        mask.append([0] * (p_len - p) + [1] * (p + a) + [0] * (a_len - a))
        resp_mask.append([1.0] * a + [0.0] * (a_len - a))
        logp.append([*logprobs, *[0.0] * (a_len - a)])
    width = p_len + a_len
    input_ids = torch.tensor(ids, dtype=torch.long).view(num_rows, width)
    attention_mask = torch.tensor(mask, dtype=torch.long).view(num_rows, width)
    response_mask = torch.tensor(resp_mask, dtype=torch.float32).view(num_rows, a_len)
    old_logp = torch.tensor(logp, dtype=torch.float32).view(num_rows, a_len)
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "old_logp": old_logp,
        "step_reward": torch.tensor([t.reward for _, _, t in rows], dtype=torch.float32),
        "episode_return": torch.tensor([ep.total_return for ep, _, _ in rows], dtype=torch.float32),
        "won": torch.tensor([ep.won for ep, _, _ in rows], dtype=torch.bool),
    }
    if scored:
        tensors.update(choice_tensors([t for _, _, t in rows], pad_token_id))
    fields = {
        "traj_id": lambda ep, i, t: ep.traj_id,
        "step": lambda ep, i, t: i,
        "group_id": lambda ep, i, t: ep.group_id,
        "task_id": lambda ep, i, t: ep.task_id,
        "anchor": lambda ep, i, t: t.anchor,
        "valid_action": lambda ep, i, t: t.valid_action,
        "format_ok": lambda ep, i, t: t.format_ok,
        "done": lambda ep, i, t: i == len(ep.turns) - 1,
        "truncated": lambda ep, i, t: t.truncated,
        "terminated": lambda ep, i, t: t.terminated,
        "potential": lambda ep, i, t: _nan_if_none(t.potential),
        "next_potential": lambda ep, i, t: _nan_if_none(t.info.get("potential")),
        "finish_reason": lambda ep, i, t: t.finish_reason,
        "prompt_truncated": lambda ep, i, t: t.prompt_truncated,
        "response_text": lambda ep, i, t: t.response_text,
        "action": lambda ep, i, t: t.action,
    }
    meta = {k: [f(*row) for row in rows] for k, f in fields.items()}
    info = {"view": "step", "prompt_length": p_len, "response_length": a_len}
    info["pad_token_id"] = pad_token_id
    info["scored_choices"] = bool(scored)  # the rows' kind, declared: `holds_choices`
    return Batch.from_dict(tensors, _object_meta(meta, ("anchor",)), info)


def _response(t: TurnRecord) -> tuple[list[int], list[float]]:
    """A row's response tokens and their old logprobs: as generated, or for a scored
    choice one token (the candidate's first) carrying the categorical's logprob."""
    if t.choice is None:
        return t.response_ids, t.logprobs
    return t.choice.token_ids[t.choice.chosen][:1], [t.choice.logp]


def choice_tensors(turns: list[TurnRecord], pad_token_id: int) -> dict[str, torch.Tensor]:
    """`CHOICE_KEYS` of scored turns: (R, K, L) candidates padded to the most candidates
    and the longest candidate of the batch."""
    num_rows = len(turns)
    k = max(len(t.choice.token_ids) for t in turns)
    length = max(len(ids) for t in turns for ids in t.choice.token_ids)
    ids, mask, norm = [], [], []
    for t in turns:
        c = t.choice
        for cand in c.token_ids:
            ids.append([*cand, *[pad_token_id] * (length - len(cand))])
            mask.append([1] * len(cand) + [0] * (length - len(cand)))
        ids += [[pad_token_id] * length] * (k - len(c.token_ids))
        mask += [[0] * length] * (k - len(c.token_ids))
        norm.append([*c.norms, *[1.0] * (k - len(c.norms))])
    out = {
        "cand_ids": torch.tensor(ids, dtype=torch.long).view(num_rows, k, length),
        "cand_mask": torch.tensor(mask, dtype=torch.long).view(num_rows, k, length),
        "cand_norm": torch.tensor(norm, dtype=torch.float32).view(num_rows, k),
        "chosen": torch.tensor([t.choice.chosen for t in turns], dtype=torch.long),
    }
    if all(t.choice.teacher_p is not None for t in turns):  # labelled by a teacher
        p = [[*t.choice.teacher_p, *[0.0] * (k - len(t.choice.teacher_p))] for t in turns]
        out["teacher_p"] = torch.tensor(p, dtype=torch.float32).view(num_rows, k)
    return out


def pad_choices(batch: Batch, num_candidates: int, length: int, pad_token_id: int) -> Batch:
    """`batch` with its `CHOICE_KEYS` padded to `num_candidates` x `length` (to merge
    batches built apart, e.g. by several rollout workers); as is without them."""
    if "cand_ids" not in batch.tensors:
        return batch
    _, k, l0 = batch.tensors["cand_ids"].shape
    pad3 = (0, length - l0, 0, num_candidates - k)
    tensors = dict(batch.tensors)
    tensors["cand_ids"] = F.pad(tensors["cand_ids"], pad3, value=pad_token_id)
    tensors["cand_mask"] = F.pad(tensors["cand_mask"], pad3)
    tensors["cand_norm"] = F.pad(tensors["cand_norm"], (0, num_candidates - k), value=1.0)
    if "teacher_p" in tensors:  # no teacher mass on a padding slot
        tensors["teacher_p"] = F.pad(tensors["teacher_p"], (0, num_candidates - k))
    return Batch(tensors, batch.meta, dict(batch.info))


def _nan_if_none(x) -> float:
    return float("nan") if x is None else float(x)


def _object_meta(meta: dict, keys: tuple[str, ...]) -> dict:
    """Keep `keys` as object arrays (anchors are tuples; numpy must not widen them)."""
    import numpy as np

    out = dict(meta)
    for k in keys:
        arr = np.empty(len(meta[k]), dtype=object)
        arr[:] = list(meta[k]) if meta[k] else []
        out[k] = arr
    return out


def build_episode_batch(episodes: list[EpisodeState], pad_token_id: int) -> Batch:
    num_rows = len(episodes)
    length = max((len(ep.seq_ids) for ep in episodes), default=0)
    input_ids = torch.full((num_rows, length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((num_rows, length), dtype=torch.long)
    loss_mask = torch.zeros((num_rows, length), dtype=torch.float32)
    old_logp = torch.zeros((num_rows, length), dtype=torch.float32)
    token_reward = torch.zeros((num_rows, length), dtype=torch.float32)
    turn_index = torch.full((num_rows, length), -1, dtype=torch.long)
    for r, ep in enumerate(episodes):
        n = len(ep.seq_ids)
        input_ids[r, :n] = torch.tensor(ep.seq_ids, dtype=torch.long)
        attention_mask[r, :n] = 1
        loss_mask[r, :n] = torch.tensor(ep.seq_generated, dtype=torch.float32)
        old_logp[r, :n] = torch.tensor(ep.seq_logp, dtype=torch.float32)
        turn_index[r, :n] = torch.tensor(ep.seq_turn, dtype=torch.long)
        last_gen: dict[int, int] = {}
        for pos, (gen, turn) in enumerate(zip(ep.seq_generated, ep.seq_turn)):
            if gen:
                last_gen[turn] = pos
        for turn, t in enumerate(ep.turns):
            # A turn that generated nothing puts its reward on the last token before it.
            pos = last_gen.get(turn, max(n - 1, 0))
            token_reward[r, pos] += t.reward
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "loss_mask": loss_mask,
        "old_logp": old_logp,
        "token_reward": token_reward,
        "turn_index": turn_index,
        "episode_return": torch.tensor([ep.total_return for ep in episodes], dtype=torch.float32),
        "won": torch.tensor([ep.won for ep in episodes], dtype=torch.bool),
    }
    meta = {
        "traj_id": [ep.traj_id for ep in episodes],
        "group_id": [ep.group_id for ep in episodes],
        "task_id": [ep.task_id for ep in episodes],
        "num_turns": [len(ep.turns) for ep in episodes],
        "truncated": [ep.truncated for ep in episodes],
        "truncation_reason": [ep.truncation_reason for ep in episodes],
        "anchors": [tuple(t.anchor for t in ep.turns) for ep in episodes],
        "step_rewards": [tuple(float(t.reward) for t in ep.turns) for ep in episodes],
    }
    meta = _object_meta(meta, ("anchors", "step_rewards"))
    return Batch.from_dict(tensors, meta, {"view": "episode", "pad_token_id": pad_token_id})
