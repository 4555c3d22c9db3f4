"""Exact and near-duplicate removal, and near-duplicate clustering for leak-free splits.

Exact duplicates are found by hashing normalised text (`minhash.normalize`: invisible
characters removed, NFKC, case folded, whitespace collapsed). Near duplicates use MinHash
signatures of character shingles, computed a batch of rows at a time
(`arborl.curate.minhash`), and LSH bands: rows that share a band are the candidates, so
finding them costs a few dict lookups per row instead of all pairs. The texts are read
from the records when a stage needs them (`LazyTexts`: a spooled row comes back from
disk), never all held at once. The
bands are chosen loosely (they propose extra candidates rather than miss pairs); a
candidate whose signatures agree on far fewer bins than the threshold asks (6 standard
errors below it, `estimate_floor`) is skipped, and every other one is confirmed by the
exact Jaccard similarity of the two shingle sets, so the threshold means exactly what it
says. (Without that floor, the chance candidates of unrelated rows, which grow with the
square of the row count, made a 100,000-row run spend most of its time on them.) Rows are visited best first (score, won, return,
then input order), so the row kept from a duplicate set is its best.

Stages that sign texts take a `signers` dict (settings -> `Signer`) from the pipeline, so
a text that two stages read (the task texts of the split and of the leak check) is signed
once.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from arborl.curate.config import DedupConfig
from arborl.curate.minhash import (
    Signer,
    band_keys,
    band_params,
    estimate_floor,
    normalize,
    shared_keys,
    text_digest,
)
from arborl.curate.records import LazyTexts, Record, Subset, conversation_text

Signers = dict[tuple[int, int, int], Signer]
"""Signers by (num_perm, shingle_size, seed): one per setting, shared by the stages of a run."""


def signer_for(signers: Signers | None, num_perm: int, size: int, seed: int) -> Signer:
    """The run's signer for these settings (a fresh one when `signers` is None)."""
    if signers is None:
        return Signer(num_perm, size, seed)
    key = (num_perm, size, seed)
    if key not in signers:
        signers[key] = Signer(num_perm, size, seed)
    return signers[key]


def rank_key(r: Record) -> tuple:
    """Sort key, best first: higher score, won, higher return, earlier input."""
    score = r.score if r.score is not None else float("-inf")
    return (-score, not r.won, -r.total_return)


def best_first(records: Sequence[Record]) -> list[Record]:
    return sorted(records, key=rank_key)  # stable: ties keep input order


def _bucket(r: Record, cfg: DedupConfig) -> bool | None:
    return r.won if cfg.same_outcome_only else None


def exact_dedup(records: list[Record], cfg: DedupConfig) -> tuple[list[Record], list[tuple]]:
    """(kept in input order, [(dropped, reason)])."""
    seen: dict[tuple, Record] = {}
    dropped = []
    for r in best_first(records):
        digest = hashlib.sha1(normalize(conversation_text(r.traj)).encode()).digest()
        key = (_bucket(r, cfg), digest)
        if key in seen:
            dropped.append((r, f"exact duplicate of {seen[key].where}"))
        else:
            seen[key] = r
    kept_ids = {id(r) for r in seen.values()}
    return [r for r in records if id(r) in kept_ids], dropped


@lru_cache(maxsize=64)
def candidate_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows per band) that over-generate candidates: chosen for `threshold - 0.2`
    and weighted 4:1 against false negatives, because a missed pair is a kept duplicate or
    a leak, while a spare candidate only costs one exact Jaccard check."""
    return band_params(max(0.05, threshold - 0.2), num_perm, fp_weight=0.2)


def near_dedup(
    records: list[Record], cfg: DedupConfig, signers: Signers | None = None
) -> tuple[list[Record], list[tuple]]:
    """(kept in input order, [(dropped, reason)]): a row is dropped when a better kept row
    has Jaccard similarity >= `cfg.threshold` with it (exact, on the shingle sets of the
    kept rows it shares an LSH band with, past the estimate floor)."""
    order = best_first(records)
    # read from the records when needed (a spooled row from disk), never all held at once
    texts = LazyTexts(order, lambda r: conversation_text(r.traj))
    signer = signer_for(signers, cfg.num_perm, cfg.shingle_size, cfg.seed)
    sig = signer.sign(texts)
    keys = band_keys(sig, *candidate_bands(cfg.threshold, cfg.num_perm))
    floor = estimate_floor(cfg.threshold, cfg.num_perm)
    buckets = [_bucket(r, cfg) for r in order]
    keys ^= np.array([_BUCKET_SALT[b] for b in buckets], np.uint64)[:, None]  # in place
    tables: dict[bool | None, dict[int, list[int]]] = defaultdict(dict)
    dropped = {}
    # a row that shares no band with any row of its bucket has no candidates and is
    # nobody's: it is kept without a look-up, so only the few others take the loop below;
    # and of those, only the keys another row has go into (and are looked up in) a table
    shared = shared_keys(keys)
    for i in np.flatnonzero(shared.any(axis=1)).tolist():
        table, row_keys = tables[buckets[i]], keys[i][shared[i]].tolist()
        others = np.array(sorted({j for key in row_keys for j in table.get(key, ())}), int)
        best = None
        if others.size:
            others = others[(sig[others] == sig[i]).mean(axis=1) >= floor]
        for j in others.tolist():
            sim = signer.jaccard(texts[i], texts[j])  # earlier (better) rows first: ties
            if sim >= cfg.threshold and (best is None or sim > best[1]):  # keep the best
                best = (j, sim)
        if best is not None:
            dropped[id(order[i])] = (order[i], f"near duplicate (Jaccard {best[1]:.2f}) of "
                                               f"{order[best[0]].where}")  # fmt: skip
            continue
        for key in row_keys:
            table.setdefault(key, []).append(i)
    return [r for r in records if id(r) not in dropped], list(dropped.values())


_BUCKET_SALT = {None: 0x5EED, False: 0xFA11, True: 0x600D}
"""Xor-ed into a row's band keys by outcome bucket, so rows of two buckets never share one."""


def near_clusters(
    texts: Sequence[str],
    threshold: float,
    num_perm: int = 128,
    size: int = 5,
    seed: int = 0,
    signers: Signers | None = None,
) -> list[tuple[int, int, float]]:
    """Pairs (i, j, Jaccard) of texts at or above `threshold`, i < j, sorted. Identical
    texts pair at 1.0 without a search; distinct ones are signed once each and paired
    when they share an LSH band and their exact Jaccard similarity is high enough."""
    groups: dict[bytes, list[int]] = {}  # by digest: the texts are not kept
    for i, t in enumerate(texts):
        groups.setdefault(text_digest(t), []).append(i)
    members = list(groups.values())
    pairs = [(g[a], g[b], 1.0) for g in members if len(g) > 1
             for a in range(len(g)) for b in range(a + 1, len(g))]  # fmt: skip
    if len(members) > 1:
        distinct = Subset(texts, [g[0] for g in members])
        signer = signer_for(signers, num_perm, size, seed)
        bands = candidate_bands(threshold, num_perm)
        cand = signer.candidate_pairs(distinct, *bands, estimate_floor(threshold, num_perm))
        for p, q in cand.tolist():
            sim = signer.jaccard(distinct[p], distinct[q])
            if sim >= threshold:
                pairs += [(min(i, j), max(i, j), sim) for i in members[p]
                          for j in members[q]]  # fmt: skip
    return sorted(pairs)
