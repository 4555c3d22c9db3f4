"""Exact and near-duplicate removal, and near-duplicate clustering for leak-free splits.

Exact duplicates are found by hashing normalised text (case folded, whitespace
collapsed). Near duplicates use MinHash signatures of character shingles in an LSH index
(`datasketch`), so finding them costs about one lookup per row instead of all pairs. The
index is banded loosely (it proposes extra candidates rather than miss pairs) and each
candidate is confirmed by the exact Jaccard similarity of the two shingle sets, so the
threshold means exactly what it says. Rows are visited best first (score, won, return,
then input order), so the row kept from a duplicate set is its best.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from datasketch import MinHash, MinHashLSH

from arborl.curate.config import DedupConfig
from arborl.curate.records import Record, conversation_text

_WS = re.compile(r"\s+")


def normalize(text: str) -> str:
    return _WS.sub(" ", text.casefold()).strip()


def shingles(text: str, size: int) -> set[str]:
    """Character `size`-grams of normalised `text` (the whole text when shorter)."""
    t = normalize(text)
    if len(t) <= size:
        return {t}
    return {t[i : i + size] for i in range(len(t) - size + 1)}


def minhash(text: str, num_perm: int, size: int, seed: int) -> MinHash:
    m = MinHash(num_perm=num_perm, seed=seed)
    m.update_batch([s.encode("utf-8") for s in sorted(shingles(text, size))])
    return m


def rank_key(r: Record) -> tuple:
    """Sort key, best first: higher score, won, higher return, earlier input."""
    score = r.score if r.score is not None else float("-inf")
    return (-score, not r.traj.won, -r.traj.total_return)


def best_first(records: Sequence[Record]) -> list[Record]:
    return sorted(records, key=rank_key)  # stable: ties keep input order


def _bucket(r: Record, cfg: DedupConfig) -> bool | None:
    return r.traj.won if cfg.same_outcome_only else None


def exact_dedup(records: list[Record], cfg: DedupConfig) -> tuple[list[Record], list[tuple]]:
    """(kept in input order, [(dropped, reason)])."""
    seen: dict[tuple, Record] = {}
    dropped = []
    for r in best_first(records):
        digest = hashlib.sha1(normalize(conversation_text(r.traj)).encode()).hexdigest()
        key = (_bucket(r, cfg), digest)
        if key in seen:
            dropped.append((r, f"exact duplicate of {seen[key].where}"))
        else:
            seen[key] = r
    kept_ids = {id(r) for r in seen.values()}
    return [r for r in records if id(r) in kept_ids], dropped


def candidate_index(threshold: float, num_perm: int) -> MinHashLSH:
    """An LSH index that over-generates candidates: banded for `threshold - 0.2` and tuned
    against false negatives, because a missed pair is a kept duplicate or a leak, while a
    spare candidate only costs one exact Jaccard check."""
    return MinHashLSH(threshold=max(0.05, threshold - 0.2), num_perm=num_perm, weights=(0.2, 0.8))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def near_dedup(records: list[Record], cfg: DedupConfig) -> tuple[list[Record], list[tuple]]:
    """(kept in input order, [(dropped, reason)]): a row is dropped when a better kept row
    has Jaccard similarity >= `cfg.threshold` with it (exact, on the shingle sets of LSH
    candidates)."""
    indexes: dict[bool | None, MinHashLSH] = {}
    kept: dict[str, tuple[Record, set[str]]] = {}
    dropped = []
    for i, r in enumerate(best_first(records)):
        text = conversation_text(r.traj)
        sh, m = (
            shingles(text, cfg.shingle_size),
            minhash(text, cfg.num_perm, cfg.shingle_size, cfg.seed),
        )
        bucket = _bucket(r, cfg)
        if bucket not in indexes:  # building an index solves for its bands: do it once
            indexes[bucket] = candidate_index(cfg.threshold, cfg.num_perm)
        best = None
        for key in indexes[bucket].query(m):
            other, other_sh = kept[key]
            sim = jaccard(sh, other_sh)
            if sim >= cfg.threshold and (best is None or sim > best[1]):
                best = (other, sim)
        if best is not None:
            dropped.append((r, f"near duplicate (Jaccard {best[1]:.2f}) of {best[0].where}"))
            continue
        indexes[bucket].insert(str(i), m)
        kept[str(i)] = (r, sh)
    kept_ids = {id(r) for r, _ in kept.values()}
    return [r for r in records if id(r) in kept_ids], dropped


def near_clusters(
    texts: Sequence[str], threshold: float, num_perm: int = 128, size: int = 5, seed: int = 0
) -> list[tuple[int, int, float]]:
    """Pairs (i, j, Jaccard) of texts at or above `threshold`, i < j."""
    lsh = candidate_index(threshold, num_perm)
    sets = [shingles(t, size) for t in texts]
    pairs = []
    for i, t in enumerate(texts):
        m = minhash(t, num_perm, size, seed)
        for key in lsh.query(m):
            j = int(key)
            sim = jaccard(sets[i], sets[j])
            if sim >= threshold:
                pairs.append((j, i, sim))
        lsh.insert(str(i), m)
    return pairs
