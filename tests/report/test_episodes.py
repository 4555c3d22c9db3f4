"""Episode records, before/after pairs and the config diff."""

from arborl.report.episodes import build_episodes, config_diff, cut, flatten, pairs
from arborl.report.load import load_run


def test_episode_records_show_each_turn(runs) -> None:
    eps = build_episodes([load_run(runs[0])])
    assert len(eps) == 4 + 4 + 1  # eval at 0 and 4, one training episode
    first = eps[0]
    assert (first["source"], first["step"], first["task"], first["won"]) == ("eval", 0, "t0", True)
    assert [t["action"] for t in first["turns"]] == ["u", "d", "l"]
    assert [t["valid"] for t in first["turns"]] == [True, False, True]
    assert first["turns"][0]["response"] == "<action>u</action>"
    assert first["return"] == 1.0 and eps[-1]["source"] == "train"


def test_pairs_match_a_task_before_and_after(runs) -> None:
    eps = build_episodes([load_run(r) for r in runs])
    ps = pairs(eps)
    assert len(ps) == 8  # 4 tasks x 2 runs
    p = ps[1]
    assert (p["run"], p["task"]) == ("a", "t1")
    assert eps[p["before"]]["step"] == 0 and eps[p["after"]]["step"] == 4
    assert not eps[p["before"]]["won"] and eps[p["after"]]["won"]


def test_a_task_drawn_twice_gives_two_pairs() -> None:
    """Episodes a, a, b at each evaluation: three pairs (the review's case gave two, the
    second `a` overwriting the first), each `a` matched in order."""

    def ep(step, task):
        return {"run": "r", "source": "eval", "step": step, "task": task}

    eps = [ep(0, "a"), ep(0, "a"), ep(0, "b"), ep(9, "a"), ep(9, "b"), ep(9, "a"), ep(5, "a")]
    got = [(p["task"], p["before"], p["after"]) for p in pairs(eps)]
    assert got == [("a", 0, 3), ("a", 1, 5), ("b", 2, 4)]


def test_config_diff_lists_only_differences(runs) -> None:
    diff = config_diff([load_run(r) for r in runs])
    assert diff == [{"key": "algo.lr", "values": [1e-3, 3e-4]}]
    assert flatten({"a": {"b": 1, "c": [1]}}) == {"a.b": 1, "a.c": [1]}


def test_long_text_is_cut_with_a_count() -> None:
    assert cut("x" * 12, 10) == "x" * 10 + " … (+2)"
