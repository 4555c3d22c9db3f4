"""Leak-free train/val/test splits, stratified by domain.

Rows are first joined into task groups (union-find): rows with the same (env id, task id)
and rows whose task text is a near duplicate (MinHash, `split.threshold`) belong to one
group, and a group never straddles two splits. Groups are then dealt out, largest first
(ties in a seeded shuffle order), each to the split furthest below its target share for
the group's main domain. Afterwards `check_leaks` verifies the result independently by
task id and by near-duplicate text, and `input_leaks` reports the tasks that the inputs'
own split labels had in more than one split (the OpenManus-RL defect).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from arborl.curate.config import SplitConfig
from arborl.curate.dedup import Signers, near_clusters
from arborl.curate.minhash import normalize
from arborl.curate.records import LazyTexts, Record, Subset


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        self.parent[self.find(i)] = self.find(j)


def own_instructions(records: list[Record], preamble_min_tasks: int = 5) -> list[bytes]:
    """Each row's instruction as a key (`Record.instruction_key`: a digest of the text
    dedup compares, `normalize`d, so one task written in NFD, fullwidth or with zero-width
    spaces is one instruction), or b"" where it is empty or a preamble: an instruction that
    rows of at least `preamble_min_tasks` different tasks share word for word (every Maze
    task has the same one). Two or three ids under one instruction are more likely a leak."""
    keys = [r.instruction_key for r in records]
    tasks_of: dict[bytes, set] = defaultdict(set)
    for r, key in zip(records, keys):
        if key and len(tasks_of[key]) < preamble_min_tasks:  # enough to call it a preamble
            tasks_of[key].add(r.task_key)
    return [k if k and len(tasks_of[k]) < preamble_min_tasks else b"" for k in keys]


def task_texts(records: list[Record], mode: str, preamble_min_tasks: int = 5) -> Sequence[str]:
    """The text that identifies each row's task: its own instruction (no preamble), plus
    the first observation in `prompt` mode (where the task instance usually lives). Made
    when asked for (`LazyTexts`), so a large input's texts are not all held at once."""
    owns = own_instructions(records, preamble_min_tasks)
    own_of = {id(r): bool(own) for r, own in zip(records, owns)}

    def text(r: Record) -> str:
        t = r.traj
        own = normalize(t.instruction) if own_of[id(r)] else ""
        if mode == "instruction":
            return own
        first = t.steps[0].observation if t.steps else t.meta.get("final_observation") or ""
        return f"{own}\n{first}".strip()

    return LazyTexts(records, text)


def linked_pairs(
    records: list[Record], cfg: SplitConfig, signers: Signers | None = None
) -> list[tuple[int, int, str]]:
    """(i, j, why) for rows that must share a split: same task id, or near-duplicate text."""
    pairs = []
    first: dict[tuple[str, str], int] = {}
    for i, r in enumerate(records):
        j = first.setdefault(r.task_key, i)
        if j != i:
            pairs.append((j, i, f"same task id {r.traj.task_id!r}"))
    if cfg.text_check != "off":
        first_with: dict[bytes, int] = {}  # one task statement, several ids: the same task
        for i, own in enumerate(own_instructions(records, cfg.preamble_min_tasks)):
            j = first_with.setdefault(own, i) if own else i
            if j != i and records[i].task_key != records[j].task_key:
                pairs.append((j, i, "same instruction"))
        texts = task_texts(records, cfg.text_check, cfg.preamble_min_tasks)
        idx = [i for i, t in enumerate(texts) if t]  # empty text links nothing
        near = near_clusters(Subset(texts, idx), cfg.threshold, seed=cfg.seed, signers=signers)
        for a, b, sim in near:
            i, j = idx[a], idx[b]
            if records[i].task_key != records[j].task_key:
                pairs.append((i, j, f"near-duplicate {cfg.text_check} (Jaccard {sim:.2f})"))
    unique: dict[tuple[int, int], tuple[int, int, str]] = {}
    for i, j, why in pairs:  # one link per pair of rows, with its first reason
        unique.setdefault((min(i, j), max(i, j)), (i, j, why))
    return list(unique.values())


def task_groups(records: list[Record], pairs: list[tuple[int, int, str]]) -> list[list[int]]:
    uf = _UnionFind(len(records))
    for i, j, _ in pairs:
        uf.union(i, j)
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(len(records)):
        groups[uf.find(i)].append(i)
    return list(groups.values())


def assign_splits(
    records: list[Record], cfg: SplitConfig, signers: Signers | None = None
) -> list[tuple[int, int, str]]:
    """Set `record.split` for every record; returns the links that formed the groups.
    `signers` (see `arborl.curate.dedup`) lets `check_leaks` reuse the task texts' signatures."""
    names = list(cfg.ratios)
    total_w = sum(cfg.ratios.values())
    per_domain = Counter(r.domain for r in records)
    target = {d: {s: cfg.ratios[s] / total_w * n for s in names} for d, n in per_domain.items()}
    have = {d: dict.fromkeys(names, 0) for d in per_domain}
    pairs = linked_pairs(records, cfg, signers)
    groups = task_groups(records, pairs)
    order = np.random.default_rng(cfg.seed).permutation(len(groups))
    shuffled = sorted((groups[k] for k in order), key=len, reverse=True)
    for g in shuffled:
        if len(g) == 1:  # most groups: no vote to count
            domain = records[g[0]].domain
        else:
            domain = Counter(records[i].domain for i in g).most_common(1)[0][0]
        want, got = target[domain], have[domain]
        split = max(names, key=lambda s: want[s] - got[s])
        for i in g:
            records[i].split = split
            have[records[i].domain][split] += 1
    return pairs


def check_leaks(records: list[Record], cfg: SplitConfig, signers: Signers | None = None) -> dict:
    """Independent check of split records: tasks (by id) and near-duplicate (or, beyond
    the preamble, identical) task texts found in more than one split. Both counts are 0
    for splits `assign_splits` made. With the `signers` the split used, each task text's
    signature and shingle set are reused rather than computed again."""
    splits_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        splits_of[r.task_key].add(str(r.split))
    by_id = sorted(f"{e}/{t}" for (e, t), s in splits_of.items() if len(s) > 1)
    by_text = []
    if cfg.text_check != "off":
        texts = task_texts(records, cfg.text_check, cfg.preamble_min_tasks)
        idx = [i for i, t in enumerate(texts) if t]  # empty text is no task statement
        near = near_clusters(Subset(texts, idx), cfg.threshold, seed=cfg.seed, signers=signers)
        for a, b, sim in near:
            i, j = idx[a], idx[b]
            if records[i].split != records[j].split:
                by_text.append(f"{records[i].where} ~ {records[j].where} ({sim:.2f})")
        first_with: dict[bytes, Record] = {}
        for r, own in zip(records, own_instructions(records, cfg.preamble_min_tasks)):
            other = first_with.setdefault(own, r) if own else r
            if other.split != r.split:
                by_text.append(f"{other.where} ~ {r.where} (same instruction)")
    return {"task_id_overlaps": len(by_id), "near_dup_overlaps": len(by_text),
            "task_id_examples": by_id[:10], "near_dup_examples": by_text[:10]}  # fmt: skip


def input_split(r: Record) -> str | None:
    """The split the row's input gave it (`Record.input_split`), if any."""
    return r.input_split


def input_leaks(records: list[Record], pairs: list[tuple[int, int, str]]) -> list[dict]:
    """Links between rows whose inputs put them in different splits: leaks in the data as
    it came, which the new splits repair by keeping each group together."""
    leaks = []
    for i, j, why in pairs:
        a, b = input_split(records[i]), input_split(records[j])
        if a and b and a != b:
            leaks.append({"rows": [records[i].where, records[j].where], "input_splits": [a, b],
                          "why": why, "now_in": records[i].split})  # fmt: skip
    return leaks
