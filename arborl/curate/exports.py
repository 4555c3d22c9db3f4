"""Exports of a curated split: SFT chat rows, preference pairs, RL task prompts, trajectories.

    <split>/sft.jsonl           chat rows; assistant turns carry the loss mask (OpenAI
                                `weight` 0/1 or ShareGPT `loss`); `arborl train` style SFT
    <split>/preference.jsonl    {prompt, chosen, rejected, ...} messages, one per pair
    <split>/rl.parquet          verl-style task rows; `arborl train env.tasks_file=...`
    <split>/trajectories.jsonl  arborl trajectories (`sft.demos=...` reads them)

A preference pair is two episodes of one task: the best (quality score, else won + return)
against the worst, when the first is better by more than `export.min_margin`.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from arborl.curate.config import ExportConfig
from arborl.curate.dedup import best_first
from arborl.curate.formats import (
    LossyExportWarning,
    to_openai_messages,
    to_sharegpt_turns,
    verl_row,
    write_format,
)
from arborl.curate.records import Record, atomic_write, trajectory_to_messages
from arborl.data.tasks import task_table


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
        return {"id": r.traj.task_id, "conversations": to_sharegpt_turns(msgs)}
    return {"messages": to_openai_messages(msgs)}


def pref_value(r: Record) -> float:
    return r.score if r.score is not None else float(r.traj.won) + r.traj.total_return


def _split_prompt(msgs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(messages up to the first assistant turn, the rest) in role/content form."""
    plain = [{"role": m["role"], "content": m["content"]} for m in msgs]
    k = next((i for i, m in enumerate(plain) if m["role"] == "assistant"), len(plain))
    return plain[:k], plain[k:]


def preference_rows(records: list[Record], cfg: ExportConfig) -> list[dict]:
    by_task: dict[tuple, list[Record]] = defaultdict(list)
    for r in records:
        if r.traj.steps:
            by_task[r.task_key].append(r)
    rows = []
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
            rows.append({
                "prompt": p_c, "chosen": rest_c, "rejected": rest_r,
                "task_id": chosen.traj.task_id, "env_id": chosen.traj.env_id,
                "domain": chosen.domain, "chosen_score": pref_value(chosen),
                "rejected_score": pref_value(rejected),
                "chosen_source": chosen.where, "rejected_source": rejected.where,
            })  # fmt: skip
    return rows


def rl_rows(records: list[Record], split: str) -> list[dict]:
    """One task row per distinct task (its best episode gives the prompt)."""
    seen, rows = set(), []
    for r in best_first(records):
        if r.task_key in seen:
            continue
        seen.add(r.task_key)
        rows.append(verl_row(r.traj, len(rows), split, r.domain))
    return rows


def _jsonl(path: Path, rows: list[dict]) -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def export_split(out: Path, split: str, records: list[Record], cfg: ExportConfig) -> dict:
    """Write the chosen exports of one split under `out/split`; returns rows per export
    (and `lost_fields`, what the trajectories format could not hold)."""
    counts: dict = {}
    d = out / split
    if "sft" in cfg.kinds:
        sft = [r for r in records if r.traj.steps and (r.traj.won or not cfg.sft_won_only)]
        _jsonl(d / "sft.jsonl", [sft_row(r, cfg.sft_format) for r in sft])
        counts["sft"] = len(sft)
    if "preference" in cfg.kinds:
        pairs = preference_rows(records, cfg)
        _jsonl(d / "preference.jsonl", pairs)
        counts["preference"] = len(pairs)
    if "rl" in cfg.kinds:
        rows = rl_rows(records, split)
        table = task_table(rows)
        atomic_write(d / "rl.parquet", lambda p: pq.write_table(table, p))
        counts["rl"] = len(rows)
    if "trajectories" in cfg.kinds:
        trajs = []
        for r in records:
            t = copy.deepcopy(r.traj)
            t.meta["curated_split"] = split
            if r.score is not None:
                t.meta["quality_score"] = r.score
            trajs.append(t)
        fmt = cfg.trajectories_format
        name = "trajectories.parquet" if fmt == "verl" else "trajectories.jsonl"
        with warnings.catch_warnings():  # lost fields go to the report, not the terminal
            warnings.simplefilter("ignore", LossyExportWarning)
            lost = write_format(fmt, d / name, trajs, action_format="plain")
        if lost:
            counts["lost_fields"] = lost
        counts["trajectories"] = len(trajs)
    return counts
