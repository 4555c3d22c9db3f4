"""Reading run dirs, a crashed one included."""

import pytest

from arborl.report.load import load_run, spread


def test_spread_keeps_first_last_and_even_points() -> None:
    assert spread(list(range(10)), 4) == [0, 3, 6, 9]  # round(i * 9 / 3) for i = 0..3
    assert spread([1, 2], 5) == [1, 2]
    assert spread([1, 2, 3], 1) == [3]


def test_load_run_reads_every_file(runs) -> None:
    a = load_run(runs[0])
    assert a.name == "a" and a.config["algo"]["lr"] == 1e-3
    assert len(a.metrics) == 6  # the before eval, 4 RL steps, the final eval
    assert sorted(a.eval_episodes) == [0, 4] and len(a.eval_episodes[4]) == 4
    assert list(a.train_episodes) == [0]
    assert a.summary == {"steps": 4, "wall_s": 12.5}
    assert a.baselines["oracle"]["success"] == 1.0


def test_crashed_run_with_a_torn_line_loads_what_exists(tmp_path, run_factory) -> None:
    run = run_factory(tmp_path, "crash", 3, finished=False, baselines=False)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "train/succ')  # killed mid-write
    data = load_run(run, per_file=2)
    assert data.summary is None and data.baselines == {}
    assert [r["step"] for r in data.metrics] == [0, 1, 2, 3]
    assert list(data.eval_episodes) == [0] and len(data.eval_episodes[0]) == 2


def test_not_a_run_dir_says_what_to_give(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_run(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"holds none of .*config.yaml.*runs/<name>"):
        load_run(tmp_path)
