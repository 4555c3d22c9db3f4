"""Every search id on synthetic trees with a known best leaf (tests/search/_trees.py)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from arborl.search import ActionsProposer, Budget, FunctionEvaluator, Problem, run
from arborl.search.mcts import MCTS
from tests.search._trees import TreeEnv, exact_evaluator, ordered_proposer, path_of, random_leaves

EXACT_PARAMS = {
    "tot-bfs": {"breadth": 3, "beam": 1},
    "tot-dfs": {"breadth": 3, "threshold": 0.0, "max_per_state": 1},
    "dfsdt": {"width": 3, "give_up_value": None},
    "mcts": {"width": 3, "c": 0.5},
    "got": {"program": [["generate", 3], ["score"], ["keep_best", 1]]},
    "beam-prm": {"num_beams": 3, "beam_width": 3},
}


@pytest.mark.parametrize("algo", sorted(EXACT_PARAMS))
@pytest.mark.parametrize("tree_seed", [0, 1, 2])
def test_exact_evaluator_finds_the_best_leaf(algo, tree_seed):
    env = TreeEnv(random_leaves(tree_seed))
    problem = Problem(env, ordered_proposer(env), exact_evaluator(env), stop_on_win=False)
    res = run(problem, Budget(max_nodes=200), seed=0, algo=algo, **EXACT_PARAMS[algo])
    assert res.won, (algo, res.actions, res.stop_reason)
    assert env.leaf_rewards["".join(res.actions)] == 1.0
    assert res.stats["nodes"] <= 200


def test_tot_bfs_beam_one_is_greedy_and_full_beam_is_exhaustive():
    # Leaves: under 'a' the best is 0.8, under 'b' one leaf is 1.0; a greedy beam of 1
    # with an evaluator that only sees one step ahead (depth-1 means) picks 'a'.
    leaves = {x + y: 0.1 for x in "ab" for y in "ab"}
    leaves.update({"aa": 0.8, "ab": 0.7, "bb": 1.0, "ba": 0.0})
    env = TreeEnv(leaves, actions="ab", depth=2)
    mean_below = FunctionEvaluator(
        lambda v: sum(r for k, r in leaves.items() if k.startswith(path_of(v))) / 2
    )  # 'a': (0.8 + 0.7) / 2 = 0.75 > 'b': (0 + 1) / 2 = 0.5
    p = Problem(env, ordered_proposer(env), mean_below, stop_on_win=False)
    greedy = run(p, Budget(), algo="tot-bfs", breadth=2, beam=1)
    assert greedy.actions == ["a", "a"] and not greedy.won
    full = run(p, Budget(), algo="tot-bfs", breadth=2, beam=2)
    assert full.actions == ["b", "b"] and full.won
    assert full.stats["nodes"] == 6  # 2 + 4: every node of the tree


def test_tot_dfs_never_expands_below_threshold():
    env = TreeEnv(random_leaves(3))
    p = Problem(env, ordered_proposer(env), exact_evaluator(env), stop_on_win=False)
    res = run(p, Budget(), algo="tot-dfs", breadth=3, threshold=0.95, max_per_state=3)
    assert res.won
    for n in res.tree.nodes[1:]:
        if n.children:  # an expanded node was scored at or above the threshold
            assert n.value >= 0.95
    # Only the best path scores 1.0 >= 0.95 at every level: 1 + 3 + 3 + 3 evaluations
    # expand exactly the 3 nodes on it (root, depth 1, depth 2): 9 nodes in total.
    assert res.stats["nodes"] == 9


def test_dfsdt_backtracks_out_of_a_deceptive_branch():
    # 'a' looks best at depth 1 (0.9) but both its children give up (value 0); the
    # solution 'bb' lies under the second choice. DFSDT must leave 'a' and ask the root
    # for an action different from 'a'.
    leaves = {x + y + z: 0.0 for x in "ab" for y in "ab" for z in "ab"}
    leaves["bbb"] = 1.0
    values = {"a": 0.9, "aa": 0.0, "ab": 0.0, "b": 0.6}
    env = TreeEnv(leaves, actions="ab", depth=3)
    ev = FunctionEvaluator(lambda v: values.get(path_of(v), 0.5))
    p = Problem(env, ActionsProposer(shuffle=False), ev, stop_on_win=True)
    algo = ALGORITHMS_MAKE("dfsdt", width=2, give_up_value=0.0, backtrack_on_giveup=2)
    res = algo.run(p, Budget(max_nodes=20), seed=0)
    assert res.won and res.actions == ["b", "b", "b"]
    # Proposals: root -> 'a' (node 1); 'a' -> 'aa' (node 2) gives up, so 'a' is abandoned
    # (two levels: 'aa' and 'a'); the root is asked for an action other than 'a' -> 'b'.
    assert algo.avoid_log[:3] == [(0, ()), (1, ()), (0, ("a",))]
    assert res.stats["give_ups"] == 1 and res.stats["backtracks"] == 1
    assert res.tree[2].pruned and res.tree[2].action == "a"  # 'aa' is node 2
    assert res.stats["model_calls"] == 0  # the actions proposer is not a model


def ALGORITHMS_MAKE(name, **kw):
    from arborl.search import make_search

    return make_search(name, **kw)


def test_best_of_n_returns_the_argmax_and_weighted_sums_by_answer():
    env = TreeEnv(random_leaves(5))
    p = Problem(env, ActionsProposer(), exact_evaluator(env), stop_on_win=False)
    res = run(p, Budget(), seed=1, algo="best-of-n", n=6)
    ends = [n for n in res.tree.nodes if n.done]
    assert len(ends) == 6 and res.stop_reason == "done"
    assert res.best_node.value == max(n.value for n in ends)  # finished: their return
    # weighted: answer = first letter; the answer with the largest summed reward wins.
    p.answer_fn = lambda v: path_of(v)[0]
    w = run(p, Budget(), seed=1, algo="best-of-n", n=6, select="weighted")
    totals = Counter()
    for n in w.tree.nodes:
        if n.done:
            totals[n.answer] += n.ret
    assert w.answer == max(totals, key=totals.get)


def test_self_consistency_majority_vote():
    env = TreeEnv(random_leaves(6))
    p = Problem(env, ActionsProposer(), None, answer_fn=lambda v: path_of(v)[-1])
    res = run(p, Budget(), seed=4, algo="self-consistency", n=9)
    answers = [n.answer for n in res.tree.nodes if n.done]
    assert len(answers) == 9  # never stopped early, even past a win
    counts = Counter(answers)
    assert counts[res.answer] == max(counts.values())
    assert res.best_node.answer == res.answer


def test_mcts_formulas_and_bookkeeping():
    m = MCTS(c=1.0)
    child = type("N", (), {"visits": 2, "value_sum": 1.0, "q": 0.5, "prior": 0.5})()
    # UCT: 0.5 + 1 * sqrt(ln 10 / 2) = 0.5 + 1.072983 = 1.572983
    assert m.score(10, child, 2) == pytest.approx(1.572983, abs=1e-6)
    # PUCT: 0.5 + 1 * 0.5 * sqrt(10) / (1 + 2) = 0.5 + 0.527046 = 1.027046
    assert MCTS(c=1.0, select="puct").score(10, child, 2) == pytest.approx(1.027046, abs=1e-6)
    env = TreeEnv(random_leaves(7))
    p = Problem(env, ordered_proposer(env), exact_evaluator(env), stop_on_win=False)
    res = run(p, Budget(max_nodes=30), seed=0, algo="mcts", width=3)
    assert res.stop_reason == "budget:max_nodes" and res.stats["nodes"] == 30
    t = res.tree
    for n in t.nodes:
        if n.children:  # N counts exactly the returns backed up through the node
            own = 0 if n.parent is None else 1
            assert n.visits == own + sum(t[c].visits for c in n.children)


def test_mcts_mean_backup_by_hand():
    # depth 2, branching 1: root -> 'a' (reward 0) -> 'aa' (reward 1, done, won).
    env = TreeEnv({"aa": 1.0}, actions="a", depth=2)
    p = Problem(env, ordered_proposer(env), FunctionEvaluator(lambda v: 0.5), gamma=0.9)
    p.stop_on_win = False
    res = run(p, Budget(), seed=0, algo="mcts", width=1, max_iterations=2)
    a, aa = res.tree[1], res.tree[2]
    # iter 1: 'a' valued 0.5 -> a.W = 0 + 0.9 * 0.5 = 0.45, root.W = 0.9 * 0.45 = 0.405
    # iter 2: 'aa' is terminal (future 0) -> aa.W = 1, a.W += 0.9 * 1, root.W += 0.81
    assert aa.visits == 1 and aa.value_sum == pytest.approx(1.0)
    assert a.visits == 2 and a.value_sum == pytest.approx(0.45 + 0.9)
    assert a.q == pytest.approx((0.45 + 0.9) / 2)  # a mean of returns, divided once
    assert res.tree.root.value_sum == pytest.approx(0.405 + 0.81)
    assert res.won and math.isclose(res.best_node.ret, 1.0)


def test_puct_and_rollout_mcts_find_the_best_leaf():
    env = TreeEnv(random_leaves(8))
    # PUCT with priors that favour the best leaf's first letter.
    best = next(k for k, r in env.leaf_rewards.items() if r == 1.0)

    def priors(v):
        return [0.6 if a == best[len(path_of(v))] else 0.2 for a in v.available_actions]

    from arborl.search import FunctionProposer

    prop = FunctionProposer(lambda v: list(v.available_actions), priors=priors)
    p = Problem(env, prop, exact_evaluator(env), stop_on_win=False)
    res = run(p, Budget(max_nodes=60), seed=0, algo="mcts", select="puct", width=3, c=1.0)
    assert res.won and "".join(res.actions) == best
    # Random rollouts instead of the evaluator (value = rollout return), same optimum.
    p2 = Problem(env, ActionsProposer(), None, stop_on_win=False)
    res2 = run(p2, Budget(max_nodes=400), seed=0, algo="mcts", width=3, rollout_steps=3)
    assert res2.won and res2.stats["rollout_steps"] > 0


def test_got_refine_and_keep_valid():
    from arborl.search.got import Generate, KeepBest, KeepValid, Refine, Score

    env = TreeEnv(random_leaves(9))
    p = Problem(env, ordered_proposer(env), exact_evaluator(env), stop_on_win=False)
    # Generate 1 (always 'a'), then Refine adds the siblings 'b' and 'c' that differ from
    # what was tried; Score + KeepBest then pick the best of the three: exact search.
    prog = [Generate(1), Refine(2), Score(), KeepBest(1), KeepValid()]
    res = run(p, Budget(), seed=0, algo="got", program=prog)
    assert res.won
    refined = [n for n in res.tree.nodes if n.kind == "refine"]
    assert len(refined) == 2 * 3  # two refinements at each of the three levels
