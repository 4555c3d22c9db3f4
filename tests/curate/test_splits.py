"""Splits are stratified by domain and leak-free by task id and by near-duplicate text;
the independent leak check catches planted leaks."""

import random
from collections import Counter

from arborl.curate import Record, SplitConfig
from arborl.curate.splits import assign_splits, check_leaks, input_leaks
from arborl.data import Step, Trajectory

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
