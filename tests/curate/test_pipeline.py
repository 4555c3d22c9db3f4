"""`arborl curate` end to end on the fixtures of every format, through the real CLI: the
report accounts for every row, planted duplicates and leaks are caught, the exports have
loss masks / pairs / task rows, --strict stops naming file, row and field, and a failed
run leaves earlier outputs intact with no half-written file."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from arborl.cli.main import main
from arborl.curate import load_curate_config
from arborl.data import read_trajectories
from arborl.data.tasks import read_task_seeds
from tests.curate.conftest import UNICODE_FORMS

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "configs/curate/default.yaml"


@pytest.fixture(scope="module")
def curated(tmp_path_factory):
    out = tmp_path_factory.mktemp("curated")
    mp = pytest.MonkeyPatch()
    mp.chdir(ROOT)  # the example config names fixture paths relative to the repo
    try:
        assert main(["curate", CONFIG, "filters.max_turns=6", "--out", str(out)]) == 0
    finally:
        mp.undo()
    return out, json.loads((out / "report.json").read_text())


def test_report_accounts_for_every_row(curated):
    out, rep = curated
    # 29 rows parse + 8 malformed = 37 rows in the 7 fixture files
    assert rep["num_rows"] == 37 and rep["num_malformed"] == 8
    assert rep["num_rows"] - rep["num_malformed"] - rep["num_dropped"] == rep["num_kept"]
    assert sum(sum(c.values()) for c in rep["splits"].values()) == rep["num_kept"]
    for d in rep["dropped"]:
        assert d["reason"] and d["file"].startswith("tests/curate/fixtures/") and d["row"] >= 1
    for m in rep["malformed"]:
        assert {"file", "row", "field", "reason"} <= set(m)
    assert not any(Path(f).is_absolute() for f in rep["files"])
    table = (out / "report.txt").read_text()
    assert table.splitlines()[0].split() == [
        "domain", "read", "filter", "quality", "dedup_exact", "dedup_near", "mix",
        "train", "val", "test"]  # fmt: skip
    assert "malformed rows skipped: 8" in table


def test_planted_rows_are_caught_with_reasons(curated):
    _, rep = curated
    why = {(Path(d["file"]).name, d["row"]): (d["stage"], d["reason"]) for d in rep["dropped"]}
    assert why[("sharegpt_web_train.jsonl", 4)] == (
        "dedup_exact",
        "exact duplicate of tests/curate/fixtures/sharegpt_web_train.jsonl:3",
    )
    stage, reason = why[("sharegpt_web_train.jsonl", 6)]
    assert stage == "dedup_near" and reason.endswith("sharegpt_web_train.jsonl:5")
    assert why[("sharegpt_web_train.jsonl", 8)][0] == "filter"  # the BEL character
    assert "7 turns > filters.max_turns=6" in why[("arborl_maze.jsonl", 2)][1]
    assert len(why) == 4


def test_planted_leaks_are_kept_in_one_split(curated):
    out, rep = curated
    assert rep["leak_check"]["task_id_overlaps"] == 0 == rep["leak_check"]["near_dup_overlaps"]
    leaks = {leak["why"].split(" (")[0]: leak for leak in rep["input_leaks"]}
    assert set(leaks) == {"same task id 'web-1'", "near-duplicate prompt"}
    assert leaks["near-duplicate prompt"]["rows"] == [
        "tests/curate/fixtures/sharegpt_web_train.jsonl:2",
        "tests/curate/fixtures/sharegpt_web_val.jsonl:2",
    ]
    split_of = {}
    for split in rep["splits"]:
        for t in read_trajectories(out / split / "trajectories.jsonl"):
            split_of.setdefault((t.env_id, t.task_id), set()).add(split)
            split_of.setdefault(t.meta["source_file"] + f":{t.meta['source_row']}", set()).add(
                split
            )
    assert all(len(s) == 1 for s in split_of.values())
    train_web2 = split_of["tests/curate/fixtures/sharegpt_web_train.jsonl:2"]
    assert split_of["tests/curate/fixtures/sharegpt_web_val.jsonl:2"] == train_web2


def test_exports(curated):
    out, rep = curated
    sft = [json.loads(x) for s in rep["splits"]
           for x in (out / s / "sft.jsonl").read_text().splitlines()]  # fmt: skip
    for row in sft:
        for m in row["messages"]:
            assert ("weight" in m) == (m["role"] == "assistant")
    web7 = [r for r in sft if "shopping agent" in r["messages"][0]["content"]]
    assert [m["weight"] for m in web7[0]["messages"] if m["role"] == "assistant"] == [0, 1]
    pairs = [json.loads(x) for s in rep["splits"]
             for x in (out / s / "preference.jsonl").read_text().splitlines()]  # fmt: skip
    assert sorted(p["task_id"] for p in pairs) == ["feac9ef22bbe", "web-1"]
    for p in pairs:
        assert p["chosen_score"] > p["rejected_score"] and p["chosen"] != p["rejected"]
        assert p["prompt"][-1]["role"] == "user" and p["chosen"][0]["role"] == "assistant"
    rows = pq.read_table(out / "train" / "rl.parquet").to_pylist()
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} == set(rows[0])
    assert len({(r["data_source"], r["extra_info"]["task_id"]) for r in rows}) == len(rows)
    seeds = read_task_seeds(out / "train" / "rl.parquet", "arborl/Maze-v0", "train")
    maze_tasks = {100, 101, 103, 104, 105, 110, 111, 112, 113}
    assert set(seeds) <= maze_tasks and len(seeds) == len(set(seeds)) >= 5
    assert rep["exports"]["train"]["rl"] == len(rows)


def test_strict_stops_at_the_first_malformed_row(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main(["curate", CONFIG, "--strict", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    assert "sharegpt_web_train.jsonl row 9: field 'conversations[1].value'" in err
    assert not (tmp_path / "out").exists()  # nothing is written before the data is read


def test_failed_run_keeps_earlier_outputs_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "out"
    assert main(["curate", CONFIG, "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    import arborl.curate.pipeline as pipeline

    real = pipeline.export_split

    def export_then_crash(dest, split, records, cfg):
        counts = real(dest, split, records, cfg)
        if split == "val":  # train and val are fully staged, then the run dies
            raise OSError("disk full (simulated)")
        return counts

    monkeypatch.setattr(pipeline, "export_split", export_then_crash)
    with pytest.raises(OSError, match="disk full"):
        pipeline.run_curation(load_curate_config(["dedup.near=false"], files=[CONFIG]), out)
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # the old run's files, byte for byte, and nothing else
    assert not [p for p in out.rglob("*") if ".staging-" in str(p) or p.suffix == ".tmp"]


def test_bad_config_and_arguments(tmp_path, capsys):
    assert main(["curate", "filters.max_turn=3", f"output_dir={tmp_path}"]) == 2
    assert "Did you mean filters.max_turns?" in capsys.readouterr().err
    assert main(["curate", "not_an_override"]) == 2
    assert "neither a .yaml config file nor key=value" in capsys.readouterr().err
    assert main(["curate", "sources=[{path: no/such/*.jsonl}]", f"output_dir={tmp_path}"]) == 1
    assert "matches no file" in capsys.readouterr().err


def test_unicode_forms_of_a_task_never_straddle_train_and_test(tmp_path):
    """The review's reproducer, through the CLI: tasks written plain, NFD, fullwidth, with
    zero-width spaces, ... each under its own id; no task may end up in two splits."""
    rows = []
    for i in range(10):
        q = f"Café puzzle {i}: compute {10 + i} plus {40 - i} and answer with the number only"
        for name, form in UNICODE_FORMS.items():
            rows.append({"id": f"{name}-{i}", "metadata": {"won": True},
                         "messages": [{"role": "system", "content": "Answer arithmetic."},
                                      {"role": "user", "content": form(q)},
                                      {"role": "assistant", "content": "50"}]})  # fmt: skip
    (tmp_path / "uni.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[::-1]))
    (tmp_path / "uni.yaml").write_text(
        f"sources: [{{path: {tmp_path / 'uni.jsonl'}, domain: math}}]\n"
        "dedup: {exact: false, near: false}\n"  # keep every form: the split must group them
        "split: {ratios: {train: 0.5, test: 0.5}, text_check: prompt, threshold: 0.8}\n"
        "export: {kinds: [trajectories]}\n"
    )
    out = tmp_path / "out"
    assert main(["curate", str(tmp_path / "uni.yaml"), "--out", str(out)]) == 0
    splits_of: dict[int, set[str]] = {}
    for split in ("train", "test"):
        for t in read_trajectories(out / split / "trajectories.jsonl"):
            splits_of.setdefault(int(t.task_id.rsplit("-", 1)[1]), set()).add(split)
    assert sorted(splits_of) == list(range(10))
    assert [i for i, s in splits_of.items() if len(s) > 1] == []
    rep = json.loads((out / "report.json").read_text())
    assert rep["leak_check"]["near_dup_overlaps"] == 0
