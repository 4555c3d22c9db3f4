"""`arborl search` and `arborl eval --search` through the real CLI parser."""

from __future__ import annotations

import json
import re

import pytest

from arborl.cli.main import main

TASK = '{"numbers": [4, 7, 8, 8], "target": 24}'


def test_search_writes_result_tree_and_html(tmp_path, capsys):
    out = tmp_path / "g24.json"
    args = [
        "search",
        "--env",
        "arborl/Game24-v0",
        "--algo",
        "tot-bfs",
        "--budget",
        "300",
        "--proposer",
        "actions",
        "--task",
        TASK,
        "--param",
        "breadth=100",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["won"] is True and doc["stop_reason"] == "solved"
    # Replay the reported actions on the posed task: they really make 24.
    nums = [4, 7, 8, 8]
    for a in doc["actions"]:
        x, op, y = a.split()
        nums.remove(int(x))
        nums.remove(int(y))
        nums.append(int(eval(f"{x} {op} {y}")))  # noqa: S307 - digits and one operator
    assert 24 in nums
    assert doc["stats"]["nodes"] == len(doc["tree"]["nodes"]) - 1 <= 300
    page = (tmp_path / "g24.html").read_text()
    assert "<script src" not in page and "http" not in page  # self-contained
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    embedded = json.loads(data.group(1).replace("<\\/", "</"))
    assert embedded["tree"]["nodes"] == doc["tree"]["nodes"]
    assert "won=True" in capsys.readouterr().out


@pytest.mark.parametrize("distinct", [False, True])
def test_search_with_a_tiny_policy(tmp_path, distinct):
    out = tmp_path / "maze.json"
    args = [
        "search",
        "--policy",
        "tiny-0.1m",
        "--env",
        "arborl/Maze-v0",
        "--algo",
        "mcts",
        "--budget",
        "8",
        "--max-new-tokens",
        "3",
        "--param",
        "width=2",
        "--param",
        "skip_repeats=false",
        "--out",
        str(out),
        "--no-html",
        *(["--distinct"] if distinct else []),
    ]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["stats"]["tokens"] > 0 and doc["stats"]["model_calls"] >= 1
    # The untrained model's actions are invalid: no win, so the node budget ends it.
    assert doc["stop_reason"] == "budget:max_nodes" and doc["stats"]["nodes"] == 8
    assert not (tmp_path / "maze.html").exists()


def test_eval_with_search(tmp_path, capsys):
    js = tmp_path / "eval.json"
    args = [
        "eval",
        "--policy",
        "random",
        "--env",
        "arborl/Maze-v0",
        "--num-episodes",
        "10",
        "--search",
        "mcts",
        "--budget",
        "150",
        "--proposer",
        "actions",
        "--param",
        "c=0.2",
        "--json",
        str(js),
    ]
    assert main(args) == 0
    rows = {r["policy"]: r for r in json.loads(js.read_text())["rows"]}
    row = rows["mcts@150 (actions+heuristic, policy not called)"]
    assert row["episodes"] == 10 and 0.0 <= row["success_lo"] <= row["success"]
    assert row["success"] >= 0.7  # MCTS + the maze heuristic; random walks get ~0.1
    assert rows["oracle"]["success"] == 1.0


def test_eval_with_search_plays_the_envs_of_env_kwargs_and_max_turns(tmp_path):
    """The search row used to build its envs without --env-kwargs and --max-turns."""
    base = ["eval", "--policy", "random", "--env", "arborl/Maze-v0", "--num-episodes", "6",
            "--search", "mcts", "--budget", "60", "--proposer", "actions", "--no-baselines",
            "--no-progress"]  # fmt: skip
    js = tmp_path / "eval.json"
    assert main([*base, "--max-turns", "2", "--json", str(js)]) == 0
    (row,) = json.loads(js.read_text())["rows"]
    assert row["policy"].startswith("mcts@60 (") and 0 < row["mean_turns"] <= 2
    with pytest.raises(SystemExit, match="bogus"):
        main([*base, "--env-kwargs", '{"bogus": 1}'])


def test_a_search_row_shows_model_calls_nodes_and_stop_and_says_when_the_policy_was_idle(
    tmp_path, capsys
):
    """`--proposer actions --evaluator rollout` never calls the policy: the row used to
    carry the checkpoint's name and only --json showed mean_model_calls 0.0."""
    base = ["eval", "--policy", "tiny-0.1m", "--env", "arborl/Maze-v0", "--num-episodes", "3",
            "--search", "mcts", "--budget", "12", "--no-baselines", "--no-progress",
            "--max-turns", "3", "--max-new-tokens", "3"]  # fmt: skip
    js = tmp_path / "idle.json"
    assert main([*base, "--proposer", "actions", "--evaluator", "rollout", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    (row,) = json.loads(js.read_text())["rows"]
    name = "mcts@12 (actions+rollout, policy not called)"
    assert row["policy"] == name and row["policy_called"] is False
    assert row["mean_model_calls"] == 0.0 and row["mean_nodes"] >= 1
    header, line = out.splitlines()[1:3]
    assert header.split()[-5:] == ["episodes", "model", "calls", "nodes", "stop"]
    assert line.startswith(name) and line.split()[-2] == row["main_stop_reason"].split()[-2]
    top = max(row["stop_reasons"], key=row["stop_reasons"].get)
    assert row["main_stop_reason"] == f"{top} {row['stop_reasons'][top]}/3"
    assert f"note: 'tiny-0.1m' was never called in row {name!r} (0 model calls)" in out
    # with the policy proposing, the row is the policy's and counts its calls
    assert main([*base, "--proposer", "policy", "--param", "width=2", "--json", str(js)]) == 0
    (row,) = json.loads(js.read_text())["rows"]
    assert row["policy"] == "tiny-0.1m+mcts@12" and row["policy_called"] is True
    assert row["mean_model_calls"] > 0 and "note" not in row
    assert "note:" not in capsys.readouterr().out


def test_bad_flags_fail_clearly(capsys):
    base = ["search", "--env", "arborl/Game24-v0", "--algo", "mcts", "--proposer", "actions"]
    with pytest.raises(SystemExit, match=r"--param 'width': write KEY=VALUE"):
        main([*base, "--param", "width"])
    with pytest.raises(SystemExit, match=r"has no parameter\(s\) \['widht'\]"):
        main([*base, "--param", "widht=3"])
    with pytest.raises(SystemExit, match="proposer 'policy' needs an LM"):
        main(["search", "--env", "arborl/Game24-v0", "--algo", "mcts"])
    with pytest.raises(SystemExit, match="is not valid JSON"):
        main([*base, "--task", "{numbers"])


def test_eval_with_search_runs_in_the_pool_mode_of_the_other_rows(tmp_path, monkeypatch):
    """--pool-mode subprocess: the search forks branches by snapshot/restore in worker
    processes and finds what it finds in process (same tasks, same search seeds)."""
    import arborl.envs

    pools = []
    real = arborl.envs.make_pool

    def spy(env_id, num_envs, mode=None, **kw):
        pool = real(env_id, num_envs, mode, **kw)
        pools.append((num_envs, mode, type(pool).__name__))
        return pool

    monkeypatch.setattr(arborl.envs, "make_pool", spy)
    base = ["eval", "--policy", "random", "--env", "arborl/Maze-v0", "--num-episodes", "4",
            "--search", "mcts", "--budget", "40", "--proposer", "actions", "--no-baselines",
            "--no-progress", "--seed", "5"]  # fmt: skip
    rows = {}
    for mode in ("inproc", "subprocess"):
        js = tmp_path / f"{mode}.json"
        assert main([*base, "--pool-mode", mode, "--json", str(js)]) == 0
        (rows[mode],) = json.loads(js.read_text())["rows"]
    for key in ("success", "mean_turns", "mean_return", "mean_nodes", "stop_reasons"):
        assert rows["subprocess"][key] == rows["inproc"][key], key
    assert rows["inproc"]["mean_nodes"] > 1
    assert pools == [(4, "subprocess", "RemotePool")]  # in process: no pool, as before
