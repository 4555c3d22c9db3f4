"""Curate outputs are all-or-nothing and bad input is never read as another value
(issue 19, requirement 6): each malformed row is counted with file, row and field; a file
that cannot be read at all fails the run (exit 1); the whole output tree is swapped in at
once, so a rerun leaves no stale files and a failure leaves the previous tree as it was."""

import json
from pathlib import Path

import pytest

from arborl.cli.main import main
from arborl.curate import SourceConfig, read_sources
from arborl.curate.read import UnreadableInput

FIXTURES = Path(__file__).parent / "fixtures"
GOOD = json.loads((FIXTURES / "arborl_maze.jsonl").read_text().splitlines()[0])


def _row(**changes) -> str:
    row = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if key.startswith("step0_"):
            row["steps"][0][key[6:]] = value
        else:
            row[key] = value
    return json.dumps(row, ensure_ascii=False)


BAD_ROWS = [  # (row text, the field named)
    (_row(step0_reward="x"), "steps[0].reward"),
    (_row(step0_reward=float("nan")), "steps[0].reward"),  # json.dumps writes a bare NaN
    (_row(step0_reward=True), "steps[0].reward"),
    (_row(seed="abc"), "seed"),
    (_row(seed=1.5), "seed"),
    (_row(won="false"), "won"),
    (_row(won=float("nan")), "won"),
    (_row(step0_info=[1]), "steps[0].info"),
    (_row(step0_terminated="no"), "steps[0].terminated"),
]


def test_every_malformed_row_is_counted_with_file_row_and_field(tmp_path):
    path = tmp_path / "mixed.jsonl"
    lines = [_row(task_id=f"good-{i}") for i in range(3)] + [r for r, _ in BAD_ROWS]
    latin1 = _row(instruction="caf\u00e9").encode("latin-1")  # one non-UTF-8 byte (0xe9)
    path.write_bytes(b"\n".join(x.encode() for x in lines) + b"\n" + latin1 + b"\n")
    read = read_sources([SourceConfig(path=str(path))])
    assert [r.traj.task_id for r in read.records] == ["good-0", "good-1", "good-2"]
    got = [(m.row, m.field) for m in read.malformed]
    want = [(4 + i, field) for i, (_, field) in enumerate(BAD_ROWS)]
    assert got == want + [(4 + len(BAD_ROWS), "(encoding)")]
    assert "byte 0xe9" in read.malformed[-1].reason
    assert all(m.file.endswith("mixed.jsonl") for m in read.malformed)


def test_a_good_won_of_0_or_1_is_read_as_a_bool(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text(_row(won=1) + "\n" + _row(won=0) + "\n")
    assert [r.traj.won for r in read_sources([SourceConfig(path=str(path))]).records] == [
        True,
        False,
    ]


@pytest.mark.parametrize("kind", ["utf16", "folder", "not-json"])
def test_an_unreadable_input_fails_the_run_with_exit_1(tmp_path, capsys, kind):
    path = tmp_path / "in.jsonl"
    if kind == "utf16":
        path.write_bytes((_row() + "\n" + _row() + "\n").encode("utf-16"))
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text("hello\nworld\n")
    with pytest.raises(UnreadableInput, match="in.jsonl"):
        read_sources([SourceConfig(path=str(path))])
    out = tmp_path / "out"
    assert main(["curate", f"sources=[{{path: {path}}}]", "--out", str(out)]) == 1
    assert "in.jsonl" in capsys.readouterr().err and not out.exists()


def _curate(out: Path, *overrides: str) -> int:
    src = FIXTURES / "arborl_maze.jsonl"
    return main(["curate", f"sources=[{{path: {src}}}]", *overrides, "--out", str(out)])


def _tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_a_rerun_removes_what_the_config_no_longer_exports(tmp_path):
    out = tmp_path / "o"
    assert _curate(out) == 0
    assert (out / "val").is_dir() and (out / "train" / "rl.parquet").exists()
    assert _curate(out, "export.kinds=[sft]", "split.ratios={train: 0.9, test: 0.1}") == 0
    files = sorted(_tree(out))
    assert not (out / "val").exists()
    assert [f for f in files if f.endswith(("rl.parquet", "preference.jsonl"))] == []
    assert {"report.json", "config.yaml", "train/sft.jsonl"} <= set(files)
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no staging or old tree left


def test_a_failed_write_leaves_the_previous_tree_byte_for_byte(tmp_path, monkeypatch):
    out = tmp_path / "o"
    assert _curate(out) == 0
    before = _tree(out)
    import arborl.curate.pipeline as pipeline

    def swap_fails(staging, dest):
        (staging / "report.json").write_text("new")
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(pipeline, "_swap_in", swap_fails)
    with pytest.raises(OSError, match="Input/output error"):
        _curate(out, "export.kinds=[sft]")
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["o"]


def test_leftovers_of_a_killed_run_are_cleaned_or_put_back(tmp_path):
    out = tmp_path / "o"
    assert _curate(out) == 0
    before = _tree(out)
    (tmp_path / ".o.staging-abc").mkdir()  # killed while staging
    (tmp_path / ".o.old-xyz").mkdir()
    out.rename(tmp_path / ".o.old-xyz" / "tree")  # killed between the two renames
    from arborl.curate.pipeline import _recover

    _recover(out.resolve())
    assert _tree(out) == before and [p.name for p in tmp_path.iterdir()] == ["o"]


def test_a_folder_that_is_not_a_curate_output_is_never_replaced(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert _curate(out) == 1
    assert "is not an `arborl curate` output" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "keep me"
