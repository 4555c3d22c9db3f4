"""`arborl eval` and `arborl rollout` end to end at toy size, through the real CLI parser."""

import json

import pytest

from arborl.cli.main import main
from arborl.data import read_trajectories
from arborl.envs import registered_ids


@pytest.mark.parametrize("env_id", registered_ids())
def test_eval_random_and_oracle_on_every_env(env_id, tmp_path, capsys):
    out = tmp_path / "eval.json"
    code = main(
        ["eval", "--policy", "oracle", "--env", env_id, "--num-episodes", "4", "--json", str(out)]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    rows = {r["policy"]: r for r in doc["rows"]}
    assert sorted(rows) == ["oracle", "random"]  # no duplicate oracle row
    table = capsys.readouterr().out
    assert "95% CI" in table and env_id in table
    for r in rows.values():
        if "error" not in r:
            assert 0.0 <= r["success_lo"] <= r["success"] <= r["success_hi"] <= 1.0
            assert r["episodes"] == 4
            # the lost episodes' task ids, one per loss
            assert len(r["lost_tasks"]) == round(4 * (1 - r["success"]))
    assert "error" not in rows["random"]


def test_rollout_with_tiny_preset_writes_trajectories(tmp_path, capsys):
    for suffix in (".jsonl", ".parquet"):
        out = tmp_path / f"r{suffix}"
        code = main(
            [
                "rollout",
                "--policy",
                "tiny-0.1m",
                "--env",
                "arborl/Maze-v0",
                "--num-episodes",
                "4",
                "--group-size",
                "2",
                "--max-turns",
                "3",
                "--max-new-tokens",
                "4",
                "--no-instruction",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        assert code == 0
        trajs = read_trajectories(out)
        assert len(trajs) == 4 and all(1 <= t.num_steps <= 3 for t in trajs)
        assert trajs[0].task_id == trajs[1].task_id != trajs[2].task_id
        assert trajs[0].meta["policy"] == "tiny-0.1m" and trajs[0].env_id == "arborl/Maze-v0"
    assert "success=" in capsys.readouterr().out


def test_eval_lm_row_beside_baselines(tmp_path):
    out = tmp_path / "eval.json"
    assert (
        main(
            [
                "eval",
                "--policy",
                "tiny-0.1m",
                "--env",
                "arborl/Maze-v0",
                "--num-episodes",
                "3",
                "--max-turns",
                "2",
                "--max-new-tokens",
                "3",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert [r["policy"] for r in rows] == ["tiny-0.1m", "random", "oracle"]
    assert rows[2]["success"] >= rows[1]["success"]


def test_help_strings():
    for cmd in ("eval", "rollout"):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--help"])
        assert e.value.code == 0


def _rollout(out, *extra):
    return main(["rollout", "--policy", "random", "--env", "arborl/Maze-v0", "--max-turns", "3",
                 "--out", str(out), "--no-progress", *extra])  # fmt: skip


def test_a_killed_rollout_keeps_finished_chunks_in_a_file_marked_partial(tmp_path, monkeypatch):
    import arborl.rollout.loop as loop

    real, calls = loop.run_episodes_with_policy, []

    def dies_on_third_chunk(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # stands in for a kill mid-run
        return real(*a, **k)

    monkeypatch.setattr(loop, "run_episodes_with_policy", dies_on_third_chunk)
    out = tmp_path / "r.parquet"
    with pytest.raises(KeyboardInterrupt):
        _rollout(out, "--num-episodes", "6", "--chunk-episodes", "2")
    partial = tmp_path / "r.partial.jsonl"
    assert not out.exists() and len(read_trajectories(partial)) == 4
    monkeypatch.setattr(loop, "run_episodes_with_policy", real)
    assert _rollout(out, "--num-episodes", "6", "--chunk-episodes", "2") == 0
    assert len(read_trajectories(out)) == 6 and not partial.exists()


def test_rollout_and_eval_run_envs_in_the_pool_mode_asked_for(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert _rollout(out, "--num-episodes", "2", "--pool-mode", "subprocess") == 0
    trajs = read_trajectories(out)
    assert len(trajs) == 2 and all(t.meta["truncation_reason"] != "env_error" for t in trajs)
    doc = tmp_path / "e.json"
    code = main(["eval", "--policy", "oracle", "--env", "arborl/Maze-v0", "--num-episodes", "2",
                 "--pool-mode", "subprocess", "--no-baselines", "--json", str(doc)])  # fmt: skip
    assert code == 0
    assert json.loads(doc.read_text())["rows"][0]["success"] == 1.0
    with pytest.raises(SystemExit):
        _rollout(out, "--pool-mode", "carrier-pigeon")
    assert "invalid choice: 'carrier-pigeon'" in capsys.readouterr().err


def test_env_kwargs_reach_the_env_and_bad_ones_are_named(tmp_path, capsys):
    turns = {}
    for size in (4, 10):
        out = tmp_path / f"eval{size}.json"
        code = main(["eval", "--policy", "oracle", "--env", "arborl/Maze-v0", "--num-episodes",
                     "8", "--no-baselines", "--env-kwargs", json.dumps({"size": size}),
                     "--json", str(out)])  # fmt: skip
        assert code == 0
        (row,) = json.loads(out.read_text())["rows"]
        assert row["success"] == 1.0
        turns[size] = row["mean_turns"]
    assert turns[4] < turns[10]  # the oracle walks a longer way in the larger maze
    for bad, says in (("{size: 4}", "is not JSON"), ("[4]", "must be a JSON object")):
        with pytest.raises(SystemExit, match=says) as e:
            main(["eval", "--policy", "random", "--env", "arborl/Maze-v0", "--env-kwargs", bad])
        assert "--env-kwargs" in str(e.value)
