"""Exact and near-duplicate removal keeps the best row of each duplicate set, and
near-duplicate pairs are found whatever their place in the input."""

from arborl.curate import DedupConfig, Record
from arborl.curate.dedup import exact_dedup, near_clusters, near_dedup
from arborl.data import Step, Trajectory
from tests.curate.conftest import UNICODE_FORMS

TEXT = ("the quick brown fox jumps over the lazy dog near the river bank while the farmer "
        "watches from the old wooden fence and the sun slowly sets behind the hills")  # fmt: skip


def _rec(i, text, won=True, score=None):
    t = Trajectory(f"t{i}", "env", steps=[Step(text, "act")], won=won)
    return Record(traj=t, file="f", row=i, domain="d", score=score)


def test_exact_dedup_normalises_case_and_whitespace_and_keeps_the_best():
    a, b, c = (
        _rec(1, TEXT, score=0.1),
        _rec(2, TEXT.upper().replace(" ", "  "), score=0.9),
        _rec(3, "other"),
    )
    kept, dropped = exact_dedup([a, b, c], DedupConfig())
    assert kept == [b, c]  # b scores higher, input order kept
    assert dropped == [(a, "exact duplicate of f:2")]


def test_near_dedup_catches_a_one_word_edit_but_not_other_text():
    near = TEXT.replace("farmer", "farmers")
    a, b, c = _rec(1, TEXT), _rec(2, near), _rec(3, TEXT[::-1])
    kept, dropped = near_dedup([a, b, c], DedupConfig(threshold=0.85))
    assert kept == [a, c]
    ((r, why),) = dropped
    assert r is b and why.startswith("near duplicate (Jaccard 0.") and why.endswith("of f:1")


def test_same_outcome_only_keeps_won_and_failed_pair():
    won, lost = _rec(1, TEXT, won=True), _rec(2, TEXT, won=False)
    kept, _ = exact_dedup([won, lost], DedupConfig(same_outcome_only=True))
    assert kept == [won, lost]
    kept, _ = exact_dedup([won, lost], DedupConfig(same_outcome_only=False))
    assert kept == [won]


def test_near_clusters_pairs():
    texts = [TEXT, "something else entirely, not like the others at all", TEXT + " again"]
    pairs = near_clusters(texts, 0.8)
    assert [(i, j) for i, j, _ in pairs] == [(0, 2)]


def test_unicode_forms_of_one_episode_are_exact_and_near_duplicates():
    text = "Réponds en français : combien font 12 plus 30 ? Écris le nombre seul, s'il te plaît"
    recs = [_rec(i, form(text)) for i, form in enumerate(UNICODE_FORMS.values())]
    kept, dropped = exact_dedup(recs, DedupConfig())
    assert kept == recs[:1] and len(dropped) == len(UNICODE_FORMS) - 1
    kept, dropped = near_dedup(recs, DedupConfig(threshold=0.95))
    assert kept == recs[:1] and len(dropped) == len(UNICODE_FORMS) - 1
