"""Exports of a curated split: SFT chat rows, preference pairs, RL task prompts, trajectories.

    <split>/sft.jsonl           chat rows; assistant turns carry the loss mask (OpenAI
                                `weight` 0/1 or ShareGPT `loss`); `arborl train` style SFT
    <split>/preference.jsonl    {prompt, chosen, rejected, ...} messages, one per pair
    <split>/rl.parquet          verl-style task rows; `arborl train env.tasks_file=...`
    <split>/trajectories.jsonl  arborl trajectories (`sft.demos=...` reads them)

A preference pair is two episodes of one task: the best (quality score, else won + return)
against the worst, when the first is better by more than `export.min_margin`.

Every export is written a row at a time, each row read from its record when it is
written (a spooled row comes back from disk), so exporting holds no split in memory.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

from arborl.curate.config import ExportConfig
from arborl.curate.dedup import best_first
from arborl.curate.formats import (
    LossyExportWarning,
    to_openai_messages,
    to_sharegpt_turns,
    verl_row,
    write_format,
    write_jsonl,
    write_task_parquet,
)
from arborl.curate.records import Record, trajectory_to_messages
from arborl.data import Trajectory


def training_messages(r: Record) -> list[dict]:
    """Messages with `loss` on every assistant turn (the source's own mask, else True) and
    no trailing user turn (nothing to learn from it)."""
    msgs = trajectory_to_messages(r.traj)
    if msgs and msgs[-1]["role"] == "user":
        msgs = msgs[:-1]
    for m in msgs:
        if m["role"] == "assistant":
            m.setdefault("loss", True)
    return msgs


def sft_row(r: Record, fmt: str) -> dict:
    msgs = training_messages(r)
    if fmt == "sharegpt":
        return {"id": r.task_id, "conversations": to_sharegpt_turns(msgs)}
    return {"messages": to_openai_messages(msgs)}


def pref_value(r: Record) -> float:
    return r.score if r.score is not None else float(r.won) + r.total_return


def _split_prompt(msgs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(messages up to the first assistant turn, the rest) in role/content form."""
    plain = [{"role": m["role"], "content": m["content"]} for m in msgs]
    k = next((i for i, m in enumerate(plain) if m["role"] == "assistant"), len(plain))
    return plain[:k], plain[k:]


def iter_preference_rows(records: list[Record], cfg: ExportConfig) -> Iterator[dict]:
    """The pairs of `preference_rows`, one at a time (a pair's rows are read only then)."""
    by_task: dict[tuple, list[Record]] = defaultdict(list)
    for r in records:
        if r.num_steps:
            by_task[r.task_key].append(r)
    for group in by_task.values():
        ranked = best_first(group)
        for k in range(min(cfg.max_pairs_per_task, len(ranked) // 2)):
            chosen, rejected = ranked[k], ranked[-1 - k]
            if pref_value(chosen) - pref_value(rejected) <= cfg.min_margin:
                break
            p_c, rest_c = _split_prompt(training_messages(chosen))
            p_r, rest_r = _split_prompt(training_messages(rejected))
            if p_c != p_r:  # same task id but another prompt: not a clean pair
                continue
            yield {
                "prompt": p_c, "chosen": rest_c, "rejected": rest_r,
                "task_id": chosen.task_id, "env_id": chosen.env_id,
                "domain": chosen.domain, "chosen_score": pref_value(chosen),
                "rejected_score": pref_value(rejected),
                "chosen_source": chosen.where, "rejected_source": rejected.where,
            }  # fmt: skip


def preference_rows(records: list[Record], cfg: ExportConfig) -> list[dict]:
    return list(iter_preference_rows(records, cfg))


def iter_rl_rows(records: list[Record], split: str) -> Iterator[dict]:
    """One task row per distinct task (its best episode gives the prompt), one at a time."""
    seen: set[tuple[str, str]] = set()
    for r in best_first(records):
        if r.task_key in seen:
            continue
        seen.add(r.task_key)
        yield verl_row(r.traj, len(seen) - 1, split, r.domain)


class _Curated(Sequence[Trajectory]):
    """The split's trajectories as exported (`curated_split`, `quality_score` in meta),
    each read when asked for: a format writer streams them."""

    def __init__(self, records: list[Record], split: str) -> None:
        self.records, self.split = records, split

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        r = self.records[i]
        t = r.fresh_traj()
        t.meta["curated_split"] = self.split
        if r.score is not None:
            t.meta["quality_score"] = r.score
        return t

    def __iter__(self) -> Iterator[Trajectory]:
        return (self[i] for i in range(len(self)))


def export_split(out: Path, split: str, records: list[Record], cfg: ExportConfig) -> dict:
    """Write the chosen exports of one split under `out/split`, a row at a time; returns
    rows per export (and `lost_fields`, what the trajectories format could not hold)."""
    counts: dict = {}
    d = out / split
    if "sft" in cfg.kinds:
        sft = (r for r in records if r.num_steps and (r.won or not cfg.sft_won_only))
        counts["sft"] = write_jsonl(d / "sft.jsonl", (sft_row(r, cfg.sft_format) for r in sft))
    if "preference" in cfg.kinds:
        counts["preference"] = write_jsonl(d / "preference.jsonl",
                                           iter_preference_rows(records, cfg))  # fmt: skip
    if "rl" in cfg.kinds:
        counts["rl"] = write_task_parquet(d / "rl.parquet", iter_rl_rows(records, split))
    if "trajectories" in cfg.kinds:
        trajs = _Curated(records, split)
        fmt = cfg.trajectories_format
        name = "trajectories.parquet" if fmt == "verl" else "trajectories.jsonl"
        with warnings.catch_warnings():  # lost fields go to the report, not the terminal
            warnings.simplefilter("ignore", LossyExportWarning)
            lost = write_format(fmt, d / name, trajs, action_format="plain")
        if lost:
            counts["lost_fields"] = lost
        counts["trajectories"] = len(trajs)
    return counts
