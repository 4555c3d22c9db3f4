"""Mixing ratios give the hand-computed per-domain counts, reproducibly."""

import pytest

from arborl.curate import MixConfig, Record
from arborl.curate.mixing import mix_counts, mix_domains
from arborl.data import Trajectory


def _records(n_a=10, n_b=4):
    out = []
    for d, n in (("a", n_a), ("b", n_b)):
        out += [Record(Trajectory(f"{d}{i}", "env"), "f", i, d) for i in range(n)]
    return out


def test_counts_by_hand():
    # equal weights: T = min(10 / 0.5, 4 / 0.5) = 8 -> 4 + 4
    assert mix_counts({"a": 10, "b": 4}, {"a": 1, "b": 1}, None, False) == {"a": 4, "b": 4}
    # 3:1 -> weights 0.75, 0.25; T = min(13.33, 16) = 13 -> a round(9.75)=10, b round(3.25)=3
    assert mix_counts({"a": 10, "b": 4}, {"a": 3, "b": 1}, None, False) == {"a": 10, "b": 3}
    # total 8 at 3:1 -> 6 + 2
    assert mix_counts({"a": 10, "b": 4}, {"a": 3, "b": 1}, 8, False) == {"a": 6, "b": 2}


def test_total_beyond_supply_needs_upsampling():
    with pytest.raises(ValueError, match="mix.total=20 needs 15 rows of domain 'a' but it has 10"):
        mix_counts({"a": 10, "b": 4}, {"a": 3, "b": 1}, 20, False)
    mixed, dropped = mix_domains(
        _records(), MixConfig(ratios={"a": 3, "b": 1}, total=20, upsample=True)
    )
    assert sum(r.domain == "a" for r in mixed) == 15 and sum(r.domain == "b" for r in mixed) == 5
    assert sum("mix_copy" in r.traj.meta for r in mixed) == 6  # 5 copies of a, 1 of b
    assert dropped == []


def test_mix_drops_with_reasons_and_is_seeded():
    cfg = MixConfig(ratios={"a": 1, "b": 1}, seed=3)
    mixed, dropped = mix_domains(_records(), cfg)
    assert [r.domain for r in mixed].count("a") == 4 and len(dropped) == 6
    assert all("sampled down to 4 of 10" in why for _, why in dropped)
    again, _ = mix_domains(_records(), cfg)
    assert [r.traj.task_id for r in again] == [r.traj.task_id for r in mixed]
    only_a, dropped = mix_domains(_records(), MixConfig(ratios={"a": 1}))
    assert len(only_a) == 10 and {why for _, why in dropped} == {"domain 'b' not in mix.ratios"}
    with pytest.raises(ValueError, match=r"domain\(s\) \['c'\] with no rows"):
        mix_domains(_records(), MixConfig(ratios={"c": 1}))
