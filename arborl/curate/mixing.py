"""Per-domain mixing: sample each domain to its share of the total.

With weights w_d (normalised to sum 1) and n_d rows available, the largest total with no
repeats is T = min_d n_d / w_d; each domain then keeps round(w_d * T) rows, drawn
uniformly by an explicit RNG. A `total` above T needs `upsample=True` (rows of short
domains are repeated, marked `meta['mix_copy']`), otherwise it is an error naming the
domain that runs short.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from arborl.curate.config import MixConfig
from arborl.curate.records import Record


def mix_counts(available: dict[str, int], ratios: dict[str, float], total: int | None,
               upsample: bool) -> dict[str, int]:  # fmt: skip
    """Rows per domain for `ratios` (domains missing from `available` count as 0 rows)."""
    weights = {d: w / sum(ratios.values()) for d, w in ratios.items() if w > 0}
    most = min(available.get(d, 0) / w for d, w in weights.items())
    if total is None:
        total = int(most + 1e-9)
    elif total > most + 1e-9 and not upsample:
        short = min(weights, key=lambda d: available.get(d, 0) / weights[d])
        raise ValueError(
            f"mix.total={total} needs {round(weights[short] * total)} rows of domain "
            f"{short!r} but it has {available.get(short, 0)}; lower mix.total (at most "
            f"{int(most)}), change mix.ratios, or set mix.upsample=true"
        )
    return {d: int(round(w * total)) for d, w in weights.items()}


def mix_domains(records: list[Record], cfg: MixConfig) -> tuple[list[Record], list[tuple]]:
    """(mixed records in input order, then copies; [(dropped, reason)])."""
    if not cfg.ratios:
        return records, []
    by_domain: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_domain[r.domain].append(r)
    missing = [d for d in cfg.ratios if cfg.ratios[d] > 0 and not by_domain.get(d)]
    if missing:
        raise ValueError(
            f"mix.ratios names domain(s) {missing} with no rows left; domains present: "
            f"{sorted(by_domain)}"
        )
    counts = mix_counts({d: len(v) for d, v in by_domain.items()}, cfg.ratios, cfg.total,
                        cfg.upsample)  # fmt: skip
    rng = np.random.default_rng(cfg.seed)
    keep, copies, dropped = set(), [], []
    for d, rows in by_domain.items():
        want = counts.get(d, 0)
        if want == 0:
            dropped += [(r, f"domain {d!r} not in mix.ratios") for r in rows]
            continue
        order = rng.permutation(len(rows))
        keep |= {id(rows[i]) for i in order[:want]}
        for i in order[want:]:
            dropped.append(
                (rows[i], f"domain {d!r} sampled down to {want} of {len(rows)} (mix.ratios)")
            )
        for k in range(max(0, want - len(rows))):  # upsampling: repeat rows round-robin
            copies.append(rows[order[k % len(rows)]].mixed_copy(k // len(rows) + 1))
    return [r for r in records if id(r) in keep] + copies, dropped
