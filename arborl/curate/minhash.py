"""MinHash signatures of many texts at once, and the LSH banding that finds candidate pairs.

A signature is one-permutation MinHash (Li, Owen & Zhang, 2012): every character shingle
is hashed once to 64 bits; the top 32 bits pick one of `num_perm` bins, the low 32 bits are
its value, and each bin keeps its smallest value. A bin no shingle fell into borrows the
value of another bin, picked by a seeded sequence of tries that is the same for every text
("optimal densification", Shrivastava, 2017), so two texts agree on a bin with probability
equal to the Jaccard similarity of their shingle sets, as with `num_perm` separate hash
functions. The cost is one hash per shingle instead of `num_perm`, and it all runs over
numpy arrays holding a whole batch of texts (code points -> a hash of each `size`-gram ->
bins by `np.minimum.at`): there is no Python loop per shingle or per permutation.

`Signer` remembers the signature of each text it signed, the Jaccard values it computed
and the candidate pairs of a list of texts, so the split stage and the leak check, which
read the same task texts, do that work once. It keys them by a 16-byte digest of the text,
never by the text, and reads the texts it signs one batch at a time, so what it holds
grows by about `num_perm` x 4 bytes per distinct text, whatever the texts' length (the
curation memory bound, docs/curation.md). Shingle sets for exact Jaccard checks are kept
for the most recent texts only (`MAX_CACHED_SHINGLES`). Bands are hashed to one 64-bit key
per (row, band), which candidate searches put in plain dicts or sort.
"""

from __future__ import annotations

import hashlib
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence, Sized
from functools import lru_cache
from itertools import count

import numpy as np

_U64 = np.uint64
_MASK64 = (1 << 64) - 1
_MUL = 0x9E3779B97F4A7C15  # odd: the golden-ratio constant of splitmix64
_EMPTY = np.uint32(0xFFFFFFFF)
_CHUNK_CHARS = 1 << 21
"""Characters signed per batch: bounds the arrays of one batch (~16 bytes a character)."""
_BLOCK = 1 << 14
"""Grams hashed per numpy pass: small enough that the temporaries stay in cache."""
MAX_CACHED_SHINGLES = 1 << 18
"""Shingles a `Signer` keeps in its recent shingle sets (~70 bytes each), at most."""
MAX_CACHED_SIMS = 1 << 18
"""Jaccard values a `Signer` keeps (~200 bytes each), at most."""


def text_digest(text: str) -> bytes:
    """16 bytes that stand for `text` in sets and dicts (instead of the text itself)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


_IGNORABLE_NOT_CF = (0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F,
                     0x3164, *range(0xFE00, 0xFE10), 0xFFA0, *range(0xE0100, 0xE01F0))  # fmt: skip
"""Default-ignorable characters outside category Cf (Unicode's DerivedCoreProperties):
the combining grapheme joiner, Hangul fillers, Khmer inherent vowels and the variation
selectors, as invisible in text as the format characters are."""
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


@lru_cache(maxsize=1)
def _invisible() -> tuple[re.Pattern, re.Pattern]:
    """(BMP, astral) character classes of every format character (category Cf: zero-width
    spaces and joiners, soft hyphen, bidi marks, BOM, tags) and every other default-
    ignorable one. Two classes because a class of BMP ranges is a bitmap (~60 MB/s) while
    astral ranges are tested one by one (8x slower), so texts without an astral character,
    nearly all of them, skip the second."""
    cps = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    runs: list[list[int]] = []
    for c in sorted({*cps, *_IGNORABLE_NOT_CF}):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])

    def cls(rs: list[list[int]]) -> re.Pattern:
        return re.compile(
            "[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in rs) + "]"
        )

    return cls([r for r in runs if r[0] < 0x10000]), cls([r for r in runs if r[0] >= 0x10000])


def strip_invisible(text: str) -> str:
    """`text` without format (Cf) or other default-ignorable characters."""
    bmp, astral = _invisible()
    text = bmp.sub("", text)
    return astral.sub("", text) if _ASTRAL.search(text) else text


def normalize(text: str) -> str:
    """The text that dedup and the leak check compare: invisible characters removed (see
    `_invisible`), NFKC (so NFD accents, fullwidth forms, ligatures and compatibility
    spaces read as their plain forms), case folded, whitespace runs collapsed to one space
    and stripped. The same task written in any of those forms normalises to one text.

    Invisible characters go first, so an accent split from its letter by one composes;
    NFKC runs again after case folding, which can undo it (Unicode's NFKC_Casefold).
    ASCII text takes the short path: NFKC leaves it as it is and it has no Cf character.
    (`str.split` splits on exactly the characters regex `\\s` matches, and is several
    times faster.)"""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", strip_invisible(text))
        text = unicodedata.normalize("NFKC", text.casefold())
        return " ".join(strip_invisible(text).split())
    return " ".join(text.casefold().split())


def shingles(text: str, size: int) -> set[str]:
    """Character `size`-grams of normalised `text` (the whole text when shorter)."""
    t = normalize(text)
    if len(t) <= size:
        return {t}
    return {t[i : i + size] for i in range(len(t) - size + 1)}


def jaccard(a: set, b: set) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets), without building the union."""
    if not a and not b:
        return 1.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on a uint64 array (a bijection of 64-bit words)."""
    z ^= z >> _U64(30)
    z *= _U64(0xBF58476D1CE4E5B9)
    z ^= z >> _U64(27)
    z *= _U64(0x94D049BB133111EB)
    z ^= z >> _U64(31)
    return z


def _mix_int(z: int) -> int:
    """`_mix` of one Python int (the same function, for single values)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _gram_step(h: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """One character into the running hash of a gram: xor, multiply, fold the high half."""
    h ^= codes
    h *= _U64(_MUL)
    h ^= h >> _U64(32)
    return h


def _whole_text_hash(text: str, key: int) -> int:
    """The hash `_gram_hashes` gives a gram, for a text shorter than a gram (its one shingle)."""
    h = key
    for c in text:
        h = ((h ^ ord(c)) * _MUL) & _MASK64
        h ^= h >> 32
    return _mix_int(h)


def _codes(text: str) -> np.ndarray:
    # utf-32 holds one code point per 4 bytes, so index i is character i of the str;
    # surrogatepass keeps lone surrogates (broken input) hashable instead of raising
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)


def _gram_rows(texts: list[str], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(code points of all texts end to end, the text index of the gram starting at each
    offset): a gram that runs into the next text gets index len(texts), a row thrown away."""
    lengths = np.fromiter((len(t) for t in texts), np.int64, len(texts))
    codes = _codes("".join(texts)).astype(np.uint64)
    rows = np.repeat(np.arange(len(texts)), lengths)
    ends = np.cumsum(lengths)
    rows[(ends[:, None] - np.arange(1, size)[None, :]).ravel()] = len(texts)
    return codes, rows


def _gram_hashes(codes: np.ndarray, size: int, key: int, start: int, stop: int) -> np.ndarray:
    """Hash of each `size`-gram starting at offsets [start, stop) of `codes`: a running
    hash over `size` shifted views, then splitmix64 (blocks of ~16k stay in cache)."""
    h = np.full(stop - start, key, np.uint64)
    for j in range(size):
        _gram_step(h, codes[start + j : stop + j])
    return _mix(h)


class Signer:
    """MinHash signatures (uint32, `num_perm` bins) of texts, each text signed once."""

    def __init__(self, num_perm: int = 128, shingle_size: int = 5, seed: int = 0) -> None:
        if num_perm < 2 or shingle_size < 1:
            raise ValueError(
                f"num_perm={num_perm} and shingle_size={shingle_size} must be >= 2 and >= 1"
            )
        self.num_perm, self.shingle_size, self.seed = num_perm, shingle_size, seed
        self._key = _mix_int((seed * _MUL + 0x632BE59BD9B4E019) & _MASK64)
        self._tries: list[np.ndarray] = []  # densification: try t's source bin per bin
        self._row: dict[bytes, int] = {}  # text digest -> row of `_sigs`
        self._sigs = np.empty((0, num_perm), np.uint32)
        self._sets: dict[bytes, set[str]] = {}  # recent first-to-last
        self._num_shingles = 0
        self._sims: dict[tuple[bytes, bytes], float] = {}
        self._pairs: dict[tuple, np.ndarray] = {}

    def rows(self, texts: Iterable[str]) -> np.ndarray:
        """(len(texts),) int64: each text's row of the signature table, signing the new
        ones in batches of `_CHUNK_CHARS` characters. `texts` is read once, in order, and
        no text is kept (a lazy sequence is read one text at a time)."""
        known = len(self._row)
        # Room for every text if all are new (rows never touched stay unallocated pages),
        # so the new signatures are written in place, not gathered and concatenated.
        room = len(texts) if isinstance(texts, Sized) else 0
        table = np.empty((known + room, self.num_perm), np.uint32)
        table[:known] = self._sigs
        used = known
        out: list[int] = []
        new: dict[bytes, int] = {}
        batch: list[str] = []
        chars = 0

        def flush() -> None:
            nonlocal table, used
            part = self._sign_new(batch)
            if used + len(part) > len(table):  # `texts` had no length
                table = np.concatenate([table[:used], part])
            else:
                table[used : used + len(part)] = part
            used += len(part)

        for t in texts:
            key = text_digest(t)
            row = self._row.get(key, new.get(key))
            if row is None:
                row = new[key] = known + len(new)
                if chars and chars + len(t) > _CHUNK_CHARS:
                    flush()
                    batch, chars = [], 0
                batch.append(t)
                chars += len(t)
            out.append(row)
        if batch:
            flush()
        if new:
            self._sigs = table[:used]
            self._row.update(new)
        return np.asarray(out, np.int64)

    def sign(self, texts: Iterable[str]) -> np.ndarray:
        """(len(texts), num_perm) uint32: the signature of every text, in order (read
        only: a run of new texts is a view of the signer's table, not a copy)."""
        idx = self.rows(texts)  # first: it may grow the table
        if idx.size and idx[-1] - idx[0] == idx.size - 1 and (np.diff(idx) == 1).all():
            return self._sigs[idx[0] : idx[-1] + 1]
        return self._sigs[idx]

    def candidate_pairs(
        self, texts: Sequence[str], bands: int, rows: int, floor: float
    ) -> np.ndarray:
        """(m, 2) sorted pairs (i < j) of `texts` that share an LSH band and agree on at
        least `floor` of their bins; kept, so the leak check's second ask is free."""
        idx = self.rows(texts)
        key = (hashlib.blake2b(idx.tobytes(), digest_size=16).digest(), bands, rows, floor)
        pairs = self._pairs.get(key)
        if pairs is None:
            sig = self._sigs[idx]
            pairs = colliding_pairs(band_keys(sig, bands, rows))
            pairs = self._pairs[key] = pairs[agreement(sig, pairs) >= floor]
        return pairs

    def shingle_set(self, text: str) -> set[str]:
        """`shingles(text, shingle_size)`; the most recent ones are kept for the next exact
        Jaccard check (up to `MAX_CACHED_SHINGLES` shingles in all)."""
        key = text_digest(text)
        s = self._sets.pop(key, None)
        if s is None:
            s = shingles(text, self.shingle_size)
            self._num_shingles += len(s)
            while self._num_shingles > MAX_CACHED_SHINGLES and self._sets:
                self._num_shingles -= len(self._sets.pop(next(iter(self._sets))))
        self._sets[key] = s  # now the most recent
        return s

    def jaccard(self, a: str, b: str) -> float:
        """Exact Jaccard similarity of the two texts' shingle sets (kept for a second ask)."""
        if a == b:
            return 1.0
        ka, kb = text_digest(a), text_digest(b)
        key = (ka, kb) if ka < kb else (kb, ka)
        sim = self._sims.get(key)
        if sim is None:
            sim = jaccard(self.shingle_set(a), self.shingle_set(b))
            if len(self._sims) >= MAX_CACHED_SIMS:
                self._sims.pop(next(iter(self._sims)))
            self._sims[key] = sim
        return sim

    def _sign_new(self, texts: list[str]) -> np.ndarray:
        k, size, n = self.num_perm, self.shingle_size, len(texts)
        sig = np.full((n + 1) * k, _EMPTY, np.uint32)  # row n: grams across two texts
        filled = np.zeros((n + 1) * k, bool)

        def add(x: np.ndarray, rows: np.ndarray) -> None:  # top bits: bin; low bits: value
            cell = rows * k + ((x >> _U64(32)) * _U64(k) >> _U64(32)).astype(np.int64)
            np.minimum.at(sig, cell, (x & _U64(0xFFFFFFFF)).astype(np.uint32))
            filled[cell] = True

        norm = [normalize(t) for t in texts]
        long_ = [i for i, t in enumerate(norm) if len(t) > size]
        codes, rows = _gram_rows([norm[i] for i in long_], size)
        rows = np.append(np.asarray(long_, np.int64), n)[rows]
        num_grams = max(0, codes.size - size + 1)
        for a in range(0, num_grams, _BLOCK):
            b = min(num_grams, a + _BLOCK)
            add(_gram_hashes(codes, size, self._key, a, b), rows[a:b])
        short = [i for i, t in enumerate(norm) if len(t) <= size]  # one shingle: the text
        if short:
            whole = [_whole_text_hash(norm[i], self._key) for i in short]
            add(np.array(whole, np.uint64), np.array(short, np.int64))
        sig, filled = sig.reshape(-1, k)[:n], filled.reshape(-1, k)[:n]
        self._densify(sig, filled)
        return sig

    def _densify(self, sig: np.ndarray, filled: np.ndarray) -> None:
        """Give every empty bin the value of the first filled bin its try sequence hits."""
        one = filled.sum(axis=1) == 1  # a one-shingle text: every try lands on that bin
        if one.any():
            sig[one] = sig[one][filled[one]][:, None]
            filled = filled | one[:, None]
        rows, cols = np.nonzero(~filled)
        for t in count():
            if not rows.size:
                return
            if t == len(self._tries):
                z = _U64(self._key) ^ (np.arange(self.num_perm, dtype=np.uint64) + _U64(t << 32))
                self._tries.append((_mix(z) % _U64(self.num_perm)).astype(np.int64))
            src = self._tries[t][cols]
            hit = filled[rows, src]  # reads only filled bins, so writes never feed reads
            sig[rows[hit], cols[hit]] = sig[rows[hit], src[hit]]
            rows, cols = rows[~hit], cols[~hit]


def band_params(threshold: float, num_perm: int, fp_weight: float = 0.2) -> tuple[int, int]:
    """(bands, rows per band) with `bands * rows <= num_perm` minimising `fp_weight` x the
    chance that a pair below `threshold` collides in some band plus `1 - fp_weight` x the
    chance that a pair above it does not (each integrated over similarity)."""
    s = np.linspace(0.0, 1.0, 1001)
    below, above = s <= threshold, s >= threshold
    best, best_err = (1, 1), float("inf")
    for r in range(1, num_perm + 1):
        b = np.arange(1, num_perm // r + 1)[:, None]
        p = 1.0 - (1.0 - s**r) ** b  # (bands, s): chance that some band collides
        fp = np.trapezoid(p[:, below], s[below], axis=1)
        fn = np.trapezoid(1.0 - p[:, above], s[above], axis=1)
        err = fp_weight * fp + (1.0 - fp_weight) * fn
        k = int(np.argmin(err))
        if err[k] < best_err:
            best, best_err = (k + 1, r), float(err[k])
    return best


def estimate_floor(threshold: float, num_perm: int) -> float:
    """The least share of equal bins worth an exact Jaccard check for `threshold`: 6
    standard errors of the estimate (and at least 0.15) below it, so a pair at or above
    the threshold falls under it with a chance of about 1e-9, while the many chance
    candidates of a large set (similarity 0.1-0.3, sharing one band by luck) are skipped."""
    se = (threshold * (1.0 - threshold) / num_perm) ** 0.5
    return threshold - max(0.15, 6.0 * se)


def agreement(sig: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 14) -> np.ndarray:
    """(m,) share of equal bins of each pair (i, j) of rows of `sig`: the Jaccard estimate.
    `chunk` pairs at a time: the chance candidates of a large set can number millions, and
    gathering both rows of all of them at once took num_perm x 8 bytes a pair."""
    out = np.empty(len(pairs))
    for a in range(0, len(pairs), chunk):
        p = pairs[a : a + chunk]
        out[a : a + len(p)] = (sig[p[:, 0]] == sig[p[:, 1]]).mean(axis=1)
    return out


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64: one hash per band of each signature, different across bands, so
    equal keys mean (up to 64-bit collisions) an equal band at the same place."""
    keys = np.empty((sig.shape[0], bands), np.uint64)
    for b in range(bands):
        h = np.full(sig.shape[0], _mix_int(b + 1), np.uint64)
        for c in range(b * rows, (b + 1) * rows):
            _gram_step(h, sig[:, c].astype(np.uint64))
        keys[:, b] = _mix(h)
    return keys


def colliding_pairs(keys: np.ndarray) -> np.ndarray:
    """(m, 2) int64 sorted unique pairs (i < j) of rows sharing at least one band key."""
    n, bands = keys.shape
    flat = keys.ravel()
    order = np.argsort(flat)  # the order within a run does not matter: pairs are sorted
    ranked = flat[order]
    row = order // bands
    edge = np.flatnonzero(np.diff(ranked) != 0) + 1
    starts = np.concatenate([[0], edge])
    lengths = np.diff(np.concatenate([starts, [flat.size]]))
    pairs = [np.stack([row[starts[lengths == 2]], row[starts[lengths == 2] + 1]], axis=1)]
    for s, m in zip(starts[lengths > 2].tolist(), lengths[lengths > 2].tolist()):
        members = np.unique(row[s : s + m])
        a, b = np.triu_indices(members.size, 1)
        pairs.append(np.stack([members[a], members[b]], axis=1))
    out = np.concatenate(pairs).reshape(-1, 2)
    out = out[out[:, 0] != out[:, 1]]
    out.sort(axis=1)
    return np.unique(out, axis=0) if out.size else out


def shared_keys(keys: np.ndarray) -> np.ndarray:
    """(n, bands) bool: which band keys another row also has. Only those can ever name a
    candidate, so a search table needs no other key (most of a large set's are unique)."""
    flat = np.sort(keys.ravel())
    dup = np.unique(flat[1:][flat[1:] == flat[:-1]])
    return np.isin(keys, dup)
