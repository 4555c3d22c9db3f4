"""Splits are stratified by domain and leak-free by task id and by near-duplicate text;
the independent leak check catches planted leaks."""

import random
from collections import Counter

import pytest

from arborl.curate import Record, SplitConfig
from arborl.curate.splits import assign_splits, check_leaks, input_leaks
from arborl.data import Step, Trajectory
from tests.curate.conftest import UNICODE_FORMS

WORDS = ("apple banana cherry dolphin eagle falcon guitar harbor island jungle kettle lemon "
         "mango needle orange pepper quartz rocket saddle tiger umbrella violin walrus xylophone "
         "yogurt zebra").split()  # fmt: skip


def _task_text(i: int) -> str:
    """A task text of 12 words drawn by a seeded RNG (distinct tasks share few shingles)."""
    rng = random.Random(i)
    words = [f"{rng.choice(WORDS)}{rng.randrange(100)}" for _ in range(12)]
    return f"task {i}: " + " ".join(words)


def _records(n_per_domain=20):
    out = []
    for d in ("a", "b"):
        for i in range(n_per_domain):
            t = Trajectory(f"{d}-{i}", d, instruction="shared preamble",
                           steps=[Step(_task_text(i + 50 * (d == "b")), "go")])  # fmt: skip
            out.append(Record(t, "f", len(out) + 1, d))
    return out


def test_stratified_shares_per_domain():
    recs = _records()
    assign_splits(recs, SplitConfig(ratios={"train": 0.8, "val": 0.1, "test": 0.1}))
    for d in ("a", "b"):
        c = Counter(r.split for r in recs if r.domain == d)
        assert c == {"train": 16, "val": 2, "test": 2}  # 0.8/0.1/0.1 of 20
    assert check_leaks(recs, SplitConfig())["task_id_overlaps"] == 0


def test_same_task_and_near_duplicate_text_stay_together():
    recs = _records()
    dup_id = Record(Trajectory("a-3", "a", instruction="shared preamble",
                               steps=[Step("a completely different episode text here", "x")],
                               meta={"source_split": "val"}), "g", 1, "a")  # fmt: skip
    words = recs[5].traj.steps[0].observation.split()
    text = " ".join(words[:-1] + [words[-1] + "x"])  # one word changed
    dup_text = Record(Trajectory("a-99", "a", instruction="shared preamble",
                                 steps=[Step(text, "y")], meta={"source_split": "val"}), "g", 2, "a")  # fmt: skip
    for r in recs:
        r.traj.meta["source_split"] = "train"
    recs += [dup_id, dup_text]
    cfg = SplitConfig(seed=1)
    pairs = assign_splits(recs, cfg)
    assert dup_id.split == recs[3].split and dup_text.split == recs[5].split
    leaks = input_leaks(recs, pairs)
    assert sorted(leak["why"].split(" (")[0] for leak in leaks) == [
        "near-duplicate prompt", "same task id 'a-3'"]  # fmt: skip
    assert check_leaks(recs, cfg) == {"task_id_overlaps": 0, "near_dup_overlaps": 0,
                                      "task_id_examples": [], "near_dup_examples": []}  # fmt: skip


def test_check_leaks_catches_a_bad_assignment():
    recs = _records(5)
    twin = Record(Trajectory("a-0", "a", steps=[Step(recs[0].traj.steps[0].observation, "z")]),
                  "g", 1, "a")  # fmt: skip
    for r in recs:
        r.split = "train"
    twin.split = "test"  # planted: the same task (and text) in train and test
    report = check_leaks(recs + [twin], SplitConfig())
    assert report["task_id_overlaps"] == 1 and report["task_id_examples"] == ["a/a-0"]
    assert report["near_dup_overlaps"] == 1


def test_shared_preamble_does_not_merge_different_tasks():
    recs = _records()
    pairs = assign_splits(recs, SplitConfig())
    assert pairs == []  # every row is its own task: no links at all


def test_a_rare_shared_instruction_is_task_text_not_preamble():
    recs = _records(6)  # 12 tasks under "shared preamble": left out of the text check
    question = "What is the capital of the country whose flag has a red maple leaf?"
    for k, obs in enumerate(("tool output A", "a different tool output B")):
        recs.append(Record(Trajectory(f"gaia-{k}", "a", instruction=question,
                                      steps=[Step(obs, "answer")]), "g", k + 1, "a"))  # fmt: skip
    pairs = assign_splits(recs, SplitConfig())
    assert [(recs[i].traj.task_id, recs[j].traj.task_id) for i, j, _ in pairs] == [
        ("gaia-0", "gaia-1")
    ]
    assert recs[-1].split == recs[-2].split
    recs[-1].split = "test" if recs[-2].split != "test" else "val"  # planted: split them
    report = check_leaks(recs, SplitConfig())
    assert report["near_dup_overlaps"] == 1 and report["near_dup_examples"][0].endswith(
        "(same instruction)")  # fmt: skip


def _unicode_task_rows(n_tasks: int, shuffle: bool = True) -> list[Record]:
    """`n_tasks` tasks, each written in every one of UNICODE_FORMS under its own task id
    (as rows scraped from several places arrive), plain form first or shuffled."""
    recs = []
    for i in range(n_tasks):
        text = f"Café puzzle {i}: {_task_text(i)}, résumé style"
        for name, form in UNICODE_FORMS.items():
            t = Trajectory(f"{name}-{i}", "math", instruction="Answer arithmetic.",
                           steps=[Step(form(text), "42")], meta={"task": i})  # fmt: skip
            recs.append(Record(t, "f", len(recs) + 1, "math"))
    if shuffle:
        random.Random(0).shuffle(recs)
    return recs


def test_unicode_forms_of_a_task_stay_in_one_split():
    recs = _unicode_task_rows(12)
    cfg = SplitConfig(ratios={"train": 0.5, "test": 0.5}, seed=0)
    assign_splits(recs, cfg)
    splits_of = {}
    for r in recs:
        splits_of.setdefault(r.traj.meta["task"], set()).add(r.split)
    assert all(len(s) == 1 for s in splits_of.values()), splits_of
    assert Counter(r.split for r in recs) == {"train": 36, "test": 36}  # 6 tasks x 6 forms each
    assert check_leaks(recs, cfg)["near_dup_overlaps"] == 0


@pytest.mark.parametrize("mode", ["prompt", "instruction"])
def test_check_leaks_sees_a_task_in_two_unicode_forms(mode):
    recs = _unicode_task_rows(3, shuffle=False)
    for r in recs:
        r.split = "train" if r.traj.task_id.startswith("plain") else "test"
        if mode == "instruction":  # the task lives in the instruction, the step is shared
            r.traj.instruction, r.traj.steps[0].observation = r.traj.steps[0].observation, "go"
    # 6 ids under one instruction would read as a preamble (5 by default) and be skipped
    cfg = SplitConfig(text_check=mode, preamble_min_tasks=len(UNICODE_FORMS) + 1)
    report = check_leaks(recs, cfg)
    assert report["task_id_overlaps"] == 0  # every row has its own id: only the text tells
    # each plain row is in train, its 5 other forms in test: 5 near-duplicate links per task,
    # and in instruction mode 5 more: the instructions are one text once normalised, and
    # each form is compared with the task's first row, its plain one
    assert report["near_dup_overlaps"] == 3 * (len(UNICODE_FORMS) - 1) * (
        1 + (mode == "instruction")
    )
