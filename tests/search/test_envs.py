"""Searches on the built-in envs with known optima, and the branch-isolation property."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arborl.envs as E
from arborl.envs.base import TextEnv
from arborl.envs.builtin.maze import bfs_distances
from arborl.envs.builtin.sokoban import solve as sokoban_solve
from arborl.search import (
    ActionsProposer,
    Budget,
    Candidate,
    Problem,
    SearchContext,
    heuristic_evaluator,
    run,
)

GAME24 = "arborl/Game24-v0"


@pytest.mark.parametrize(
    "algo,params",
    [("tot-bfs", {"breadth": 100, "beam": 5}), ("mcts", {"width": 100, "c": 0.5})],
)
def test_game24_tot_and_mcts_solve_99_of_100(algo, params):
    env = E.make(GAME24)
    ev = heuristic_evaluator(GAME24)  # reads the numbers shown, never the task dict
    solved = 0
    for seed in range(100):  # Game24's task draw keeps solvable puzzles only
        p = Problem(env, ActionsProposer(), ev, seed=seed)
        res = run(p, Budget(max_nodes=300), seed=0, algo=algo, **params)
        solved += res.won
        if res.won:  # replay the actions on a fresh env: the win is real
            fresh = E.make(GAME24)
            fresh.reset(seed=seed)
            info = {}
            for a in res.actions:
                _, _, _, _, info = fresh.step(a)
            assert info["won"]
    assert solved >= 99, solved


def _maze_optimum(task) -> int:
    grid = task["grid"]
    free = {(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "."}
    return bfs_distances(free, tuple(task["agent"]))[tuple(task["goal"])]


def _sokoban_optimum(env, task) -> int:
    walls, targets = env._layout(task)
    boxes = tuple(sorted(tuple(b) for b in task["boxes"]))
    return len(sokoban_solve(walls, targets, (tuple(task["player"]), boxes)))


@pytest.mark.parametrize(
    "env_id,kwargs", [("arborl/Maze-v0", {}), ("arborl/Sokoban-v0", {"max_moves": 10})]
)
def test_mcts_finds_optimal_length_solutions(env_id, kwargs):
    env = E.make(env_id, **kwargs)
    for seed in range(12):
        # gamma < 1 makes shorter solutions worth more; no stop at the first win, so the
        # result is the shortest win MCTS found within the budget.
        p = Problem(env, ActionsProposer(), heuristic_evaluator(env_id), seed=seed, gamma=0.95)
        p.stop_on_win = False
        res = run(p, Budget(max_nodes=500), seed=0, algo="mcts", width=4, c=0.2)
        opt = _maze_optimum(env.task) if "Maze" in env_id else _sokoban_optimum(env, env.task)
        assert res.won and len(res.actions) == opt, (seed, res.actions, opt)


class LookupEnv(TextEnv):
    """LATS's WikiEnv bug in miniature: `lookup` reads the page the last `search` opened."""

    env_id = "test/Lookup-v0"
    _state_attrs = ("page", "notes")
    PAGES = {"A": "apple", "B": "banana", "C": "cherry"}

    def __init__(self):
        super().__init__(max_turns=50)
        self.page, self.notes = "", []

    def _sample_task(self, rng, split):
        return {"q": "fruit"}

    def _task_id(self, task):
        return "lookup"

    def _start(self, task):
        self.page, self.notes = "", []
        return self._render()

    def _render(self):
        return f"page={self.page} notes={','.join(self.notes)}"

    def _act(self, action):
        if action.startswith("search "):
            self.page = action[7:]
        elif action == "lookup" and self.page:
            self.notes.append(self.PAGES[self.page])
        return self._render(), 0.0, False, True

    def _won(self):
        return False

    def _anchor(self):
        return (self.page, tuple(self.notes))

    def _available_actions(self):
        return ["search A", "search B", "search C", "lookup"]


OPS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_branches_never_see_each_others_state(ops):
    env = LookupEnv()
    ctx = SearchContext(Problem(env, ActionsProposer()), Budget(), seed=0)
    frozen = {0: copy.deepcopy(ctx.tree[0].snapshot)}
    acts = env._available_actions()
    for parent_pick, a in ops:  # grow the tree in an arbitrary interleaved order
        parent = parent_pick % len(ctx.tree)
        node = ctx.add_child(parent, Candidate(action=acts[a]))
        frozen[node.id] = copy.deepcopy(node.snapshot)
    for node in ctx.tree.nodes:
        assert node.snapshot == frozen[node.id]  # a child's step never touched its parent
        fresh = LookupEnv()  # a straight-line replay of the node's own path
        obs, _ = fresh.reset(seed=0)
        for i in ctx.tree.path_ids(node.id)[1:]:
            obs, *_ = fresh.step(ctx.tree[i].action)
        assert obs == node.observation
        assert fresh.snapshot()["notes"] == node.snapshot["notes"]
