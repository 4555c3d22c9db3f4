"""Budgets stop searches exactly; the same seed grows the same tree; registry errors."""

from __future__ import annotations

import pytest

import arborl.envs as E
from arborl.search import (
    ALGORITHMS,
    ActionsProposer,
    Budget,
    LMProposer,
    Problem,
    heuristic_evaluator,
    make_search,
    run,
)

GAME24 = "arborl/Game24-v0"
# Parameters that keep every search busy past 7 steps on a Game24 puzzle.
PARAMS = {
    "tot-bfs": {"breadth": 4, "beam": 2},
    "tot-dfs": {"breadth": 4, "threshold": 0.0},
    "dfsdt": {"give_up_value": None},
    "mcts": {"width": 3},
    "got": {},
    "best-of-n": {"n": 8},
    "self-consistency": {"n": 8},
    "beam-prm": {"num_beams": 4, "beam_width": 2},
}


def game24_problem(seed=0, stop_on_win=False):
    env = E.make(GAME24)
    ev = heuristic_evaluator(GAME24)
    return Problem(env, ActionsProposer(), ev, seed=seed, stop_on_win=stop_on_win)


def test_every_id_has_budget_params():
    assert sorted(PARAMS) == sorted(ALGORITHMS)


@pytest.mark.parametrize("algo", sorted(PARAMS))
def test_max_nodes_stops_exactly(algo):
    res = run(game24_problem(), Budget(max_nodes=7), seed=0, algo=algo, **PARAMS[algo])
    assert res.stop_reason == "budget:max_nodes"
    assert res.stats["nodes"] + res.stats["rollout_steps"] == 7
    assert len(res.tree) == 1 + res.stats["nodes"]


@pytest.mark.parametrize("algo", sorted(PARAMS))
def test_same_seed_same_tree_and_seeds_matter(algo):
    a = run(game24_problem(3), Budget(max_nodes=40), seed=11, algo=algo, **PARAMS[algo])
    b = run(game24_problem(3), Budget(max_nodes=40), seed=11, algo=algo, **PARAMS[algo])
    assert a.tree.digest() == b.tree.digest() and a.best == b.best
    digests = {
        run(
            game24_problem(3), Budget(max_nodes=40), seed=s, algo=algo, **PARAMS[algo]
        ).tree.digest()
        for s in range(4)
    }
    assert len(digests) > 1  # the shuffled proposer draws from the node seeds


def test_rollout_steps_count_against_max_nodes():
    res = run(game24_problem(), Budget(max_nodes=10), seed=0, algo="mcts", width=2, rollout_steps=3)
    assert res.stop_reason == "budget:max_nodes"
    assert res.stats["rollout_steps"] > 0
    assert res.stats["nodes"] + res.stats["rollout_steps"] == 10


def test_max_wall_s_with_a_fake_clock():
    ticks = iter(range(10**6))
    algo = make_search("tot-bfs", breadth=2, beam=2)
    res = algo.run(game24_problem(), Budget(max_wall_s=5), seed=0, clock=lambda: next(ticks))
    assert res.stop_reason == "budget:max_wall_s"
    # The clock ticks once per check; each new node is checked once before its step.
    assert res.stats["nodes"] <= 5


def test_max_depth_is_reported_when_it_cut_the_search():
    res = run(game24_problem(), Budget(max_depth=1), seed=0, algo="tot-bfs", breadth=3, beam=3)
    assert res.stop_reason == "budget:max_depth"
    assert res.stats["max_depth_reached"] == 1 and not res.won


@pytest.fixture(scope="module")
def tiny_lm():
    from arborl.generation import make_backend

    return make_backend("tiny-0.1m", seed=0)


def lm_problem(tiny_lm, stop_on_win=False):
    from arborl.agent import AgentConfig

    backend, tok = tiny_lm
    agent = AgentConfig(memory="last_k", memory_k=0, include_instruction=False)
    prop = LMProposer(backend, tok, agent, max_new_tokens=4, oversample=2)
    env = E.make("arborl/Maze-v0", short_actions=True)
    return Problem(
        env, prop, heuristic_evaluator("arborl/Maze-v0"), seed=0, stop_on_win=stop_on_win
    ), prop


def test_max_model_calls_and_tokens_with_an_lm_proposer(tiny_lm):
    p, _ = lm_problem(tiny_lm)
    res = run(p, Budget(max_model_calls=5), seed=0, algo="tot-bfs", breadth=2, beam=2)
    assert res.stop_reason == "budget:max_model_calls"
    assert res.stats["model_calls"] == 5 and res.stats["proposer_calls"] == 5
    p, prop = lm_problem(tiny_lm)
    res = run(p, Budget(max_tokens=37), seed=0, algo="mcts", width=2)
    assert res.stop_reason == "budget:max_tokens"
    # Every generated token is counted (duplicates dropped too), and the proposer is
    # capped to the tokens left: the limit is met exactly, never passed.
    assert res.stats["tokens"] == prop.num_tokens == 37
    kept = sum(len(n.response_ids or []) for n in res.tree.nodes)
    assert kept <= 37


def test_lm_trees_are_deterministic(tiny_lm):
    a = run(lm_problem(tiny_lm)[0], Budget(max_nodes=12), seed=5, algo="mcts", width=2)
    b = run(lm_problem(tiny_lm)[0], Budget(max_nodes=12), seed=5, algo="mcts", width=2)
    assert a.tree.digest() == b.tree.digest()
    assert [n.response_ids for n in a.tree.nodes] == [n.response_ids for n in b.tree.nodes]


def test_bad_budget_and_names_give_clear_errors():
    with pytest.raises(ValueError, match=r"budget.max_nodes=-1 must be an int >= 0"):
        Budget(max_nodes=-1)
    with pytest.raises(KeyError, match=r"Did you mean 'mcts'"):
        make_search("mctss")
    with pytest.raises(TypeError, match=r"has no parameter\(s\) \['widht'\].*'width'"):
        make_search("mcts", widht=3)
    with pytest.raises(ValueError, match="no built-in heuristic evaluator for env"):
        heuristic_evaluator("arborl/Wordle-v0")


def test_tree_mode_config_is_checked_at_start_up():
    from arborl.search.config import SearchConfig
    from arborl.train.config import load_train_config

    # The tree settings moved from `rollout.search_*` / `rollout.tree_adv` to `search.*`.
    with pytest.raises(ValueError, match=r"search.algo='mcst' is not one of"):
        SearchConfig(algo="mcst")
    with pytest.raises(ValueError, match=r"search.tree_adv='gae' is not one of"):
        SearchConfig(tree_adv="gae")
    with pytest.raises(ValueError, match=r"rollout.mode='trees' is not one of"):
        load_train_config(["rollout.mode=trees"])
