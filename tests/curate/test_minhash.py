"""The vectorised MinHash signature equals a per-shingle reference written out plainly here,
its agreement rate tracks the true Jaccard similarity, and the LSH candidate search finds
exactly the pairs an all-pairs exact comparison finds."""

import itertools
import random
import sys
import unicodedata

import numpy as np
import pytest

from arborl.curate import DedupConfig, Record
from arborl.curate import minhash as mh
from arborl.curate.dedup import candidate_bands, near_clusters, near_dedup
from arborl.data import Step, Trajectory
from tests.curate.conftest import UNICODE_FORMS

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def _splitmix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def reference_signature(text: str, num_perm: int, size: int, seed: int) -> list[int]:
    """One-permutation MinHash, one shingle and one bin at a time, then the densification:
    an empty bin j takes the value of bin splitmix(key ^ (j + t * 2**32)) % num_perm for the
    first try t = 0, 1, ... that lands on a filled bin."""
    key = _splitmix((seed * GOLDEN + 0x632BE59BD9B4E019) & M64)
    t = mh.normalize(text)  # the hashing is under test here, not the normalisation
    grams = [t] if len(t) <= size else [t[i : i + size] for i in range(len(t) - size + 1)]
    bins: list[int | None] = [None] * num_perm
    for g in grams:
        h = key
        for c in g:
            h = ((h ^ ord(c)) * GOLDEN) & M64
            h ^= h >> 32
        x = _splitmix(h)
        b, v = ((x >> 32) * num_perm) >> 32, x & 0xFFFFFFFF
        bins[b] = v if bins[b] is None else min(bins[b], v)
    out = []
    for j in range(num_perm):
        src, try_ = j, 0
        while bins[src] is None:
            src = _splitmix(key ^ (j + (try_ << 32))) % num_perm
            try_ += 1
        out.append(bins[src])
    return out


STRINGS = [
    "",
    "ab",
    "abcde",  # exactly one shingle long
    "abcdef",
    "  The  Quick\tbrown FOX\njumps over the lazy dog  ",
    "naïve café — Ünïcödé 漢字かな交じり文 🦊🦊🦊",
    "lone surrogate \ud800 and U+FFFD \ufffd stay hashable",
    " ".join(f"w{i % 97}" for i in range(400)),  # long, many shingles per bin
]


@pytest.mark.parametrize("num_perm,size,seed", [(128, 5, 0), (16, 3, 7), (64, 1, 1)])
def test_signature_equals_the_reference(num_perm, size, seed):
    sig = mh.Signer(num_perm, size, seed).sign(STRINGS)
    assert sig.dtype == np.uint32 and sig.shape == (len(STRINGS), num_perm)
    for text, row in zip(STRINGS, sig.tolist()):
        assert row == reference_signature(text, num_perm, size, seed), text


def test_batches_and_blocks_do_not_change_signatures(monkeypatch):
    texts = STRINGS + [f"task {i}: " + "x y z " * i for i in range(30)]
    whole = mh.Signer(128, 5, 0).sign(texts)
    monkeypatch.setattr(mh, "_CHUNK_CHARS", 50)  # many batches
    monkeypatch.setattr(mh, "_BLOCK", 7)  # many blocks, block edges inside texts
    signer = mh.Signer(128, 5, 0)
    assert (signer.sign(texts) == whole).all()
    assert (signer.sign(texts[::-1]) == whole[::-1]).all()  # memoised rows, in asked order
    assert (mh.Signer(128, 5, 1).sign(texts) != whole).mean() > 0.9  # a seed is a new hash


def _edit(rng: random.Random, words: list[str], n: int) -> list[str]:
    words = list(words)
    for _ in range(n):
        words[rng.randrange(len(words))] = f"v{rng.randrange(10**6)}"
    return words


def test_agreement_rate_tracks_true_jaccard():
    rng = random.Random(0)
    signer = mh.Signer(256, 5, 0)
    errors = []
    for n_edits in range(1, 40, 3):
        base = [f"w{rng.randrange(500)}" for _ in range(60)]
        a, b = " ".join(base), " ".join(_edit(rng, base, n_edits))
        true = mh.jaccard(mh.shingles(a, 5), mh.shingles(b, 5))
        sa, sb = signer.sign([a, b])
        errors.append(abs((sa == sb).mean() - true))
    # 256 bins: the standard error of one estimate is at most sqrt(0.25 / 256) = 0.031
    assert max(errors) < 0.12 and np.mean(errors) < 0.04


def test_band_params_catch_pairs_at_the_dedup_threshold():
    for threshold in (0.5, 0.8, 0.85, 0.95):
        for num_perm in (16, 128, 256):
            b, r = candidate_bands(threshold, num_perm)
            assert b * r <= num_perm
            # the chance that a pair at the threshold shares no band
            miss = (1 - threshold**r) ** b
            assert miss < (0.02 if num_perm >= 128 else 0.2), (threshold, num_perm, b, r)
    assert mh.band_params(0.65, 128) == (21, 6)  # (1-0.85^6)^21 = 5e-5 missed at 0.85


def test_colliding_pairs_lists_each_pair_once():
    keys = np.array([[1, 10], [2, 10], [1, 11], [3, 12], [3, 12]], np.uint64)
    assert mh.colliding_pairs(keys).tolist() == [[0, 1], [0, 2], [3, 4]]
    assert mh.colliding_pairs(np.array([[5, 6], [7, 8]], np.uint64)).shape == (0, 2)


def _planted_texts(seed: int, n: int = 150) -> list[str]:
    """n random texts and n/2 copies with 1-6 of 40 words changed (Jaccard ~0.6-0.95)."""
    rng = random.Random(seed)
    base = [[f"w{rng.randrange(3000)}" for _ in range(40)] for _ in range(n)]
    edits = [_edit(rng, base[rng.randrange(n)], rng.randrange(1, 7)) for _ in range(n // 2)]
    texts = [" ".join(w) for w in base + edits]
    rng.shuffle(texts)
    return texts


@pytest.mark.parametrize("threshold", [0.6, 0.8, 0.9])
def test_near_clusters_equals_all_pairs_exact_jaccard(threshold):
    texts = _planted_texts(1)
    texts += texts[:5]  # identical texts pair at 1.0 too
    sets = [mh.shingles(t, 5) for t in texts]
    brute = sorted((i, j, mh.jaccard(sets[i], sets[j]))
                   for i, j in itertools.combinations(range(len(texts)), 2)
                   if mh.jaccard(sets[i], sets[j]) >= threshold)  # fmt: skip
    assert len(brute) >= 10  # 0.9: ~17 pairs; 0.6: ~90
    assert near_clusters(texts, threshold) == brute


def _rec(i: int, text: str, score: float) -> Record:
    return Record(Trajectory(f"t{i}", "env", steps=[Step(text, "go")]), "f", i, "d", score=score)


def test_near_dedup_equals_greedy_all_pairs():
    texts = _planted_texts(2)
    rng = random.Random(3)
    recs = [_rec(i, t, rng.random()) for i, t in enumerate(texts)]
    cfg = DedupConfig(threshold=0.8)
    kept, dropped = near_dedup(recs, cfg)
    # the plain definition: best first, drop a row when a kept row is similar enough
    expect_kept: list[Record] = []
    for r in sorted(recs, key=lambda r: -r.score):
        sh = mh.shingles(f"{r.traj.steps[0].observation}\ngo", 5)
        if all(mh.jaccard(sh, mh.shingles(f"{k.traj.steps[0].observation}\ngo", 5)) < 0.8
               for k in expect_kept):  # fmt: skip
            expect_kept.append(r)
    assert {id(r) for r in kept} == {id(r) for r in expect_kept}
    assert len(dropped) == len(recs) - len(kept) > 10


UNICODE_TEXT = "Café puzzle 7: compute 12 plus 30 and answer with the first number, résumé style"


@pytest.mark.parametrize("form", UNICODE_FORMS)
def test_unicode_forms_of_a_text_normalise_and_sign_as_the_plain_text(form):
    variant = UNICODE_FORMS[form](UNICODE_TEXT)
    assert variant != UNICODE_TEXT or form == "plain"
    assert mh.normalize(variant) == mh.normalize(UNICODE_TEXT)
    signer = mh.Signer(64, 5, 0)
    assert (signer.sign([variant]) == signer.sign([UNICODE_TEXT])).all()  # Jaccard 1


def test_normalize_drops_every_invisible_character_and_is_a_fixed_point():
    cf = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert len(cf) > 150  # Unicode 14: 163 format characters
    others = ["\u034f", "\u3164", "\ufe0f", "\U000e0101"]  # CGJ, Hangul filler, VS16, VS18
    for c in cf + others:
        assert mh.normalize(f"ab{c}cd") == "abcd", hex(ord(c))
    # an accent split from its letter by an invisible character still composes with it
    assert mh.normalize("e\u200b\u0301") == mh.normalize("\u00e9") == "\u00e9"
    # NFKC_Casefold: case folding can leave text that NFKC changes again (U+0345 -> iota)
    assert mh.normalize("\u1f80") == mh.normalize("\u1f08\u0345") == "\u1f00\u03b9"
    rng = random.Random(0)
    pool = [chr(c) for c in range(0x20, 0x3000)] + cf + others + ["\ufb01", "\uff21", "\u3000"]
    for _ in range(2000):
        t = "".join(rng.choice(pool) for _ in range(rng.randrange(1, 12)))
        n = mh.normalize(t)
        assert mh.normalize(n) == n, repr(t)


def test_normalize_keeps_different_text_different():
    # NFKC keeps accents (café is not cafe) and different words; only invisibles, width,
    # composition, case and spacing are folded
    texts = ["café", "cafe", "cafè", "naïve", "naive", "10", "1 0", "½", "1/2", "ß", "s"]
    assert len({mh.normalize(t) for t in texts}) == len(texts)  # "½" is "1⁄2" (U+2044), "ß" "ss"
