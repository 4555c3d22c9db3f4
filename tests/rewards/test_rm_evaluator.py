"""A reward model as the evaluator of `arborl.search` (best-of-N, beam-prm, MCTS)."""

from __future__ import annotations

import math

import pytest

from arborl.envs import make
from arborl.rewards.reward_model import RewardModel
from arborl.rewards.rm_evaluator import RewardModelEvaluator, view_to_trajectory
from arborl.search import ActionsProposer, Budget, NodeView, Problem, run


@pytest.fixture(scope="module")
def prm() -> RewardModel:
    return RewardModel.from_spec("tiny-0.1m", "prm", max_length=128, seed=4)


def view(actions: tuple[str, ...], done: bool = False, won: bool = False) -> NodeView:
    hist = tuple((f"obs{i}", f"<think>hm</think>{a}") for i, a in enumerate(actions))
    return NodeView(node_id=len(actions), path=tuple(range(len(actions))), instruction="go",
                    observation="now", history=hist, actions=actions,
                    rewards=(0.0,) * len(actions), done=done, won=won)  # fmt: skip


def test_view_becomes_a_partial_trajectory():
    t = view_to_trajectory(view(("u", "d")))
    assert [s.observation for s in t.steps] == ["obs0", "obs1"]
    assert [s.action for s in t.steps] == ["u", "d"]
    assert t.steps[0].response == "<think>hm</think>u" and t.instruction == "go"


def test_scores_are_sigmoid_of_the_model_in_one_batch(prm):
    ev = RewardModelEvaluator(prm)
    views = [view(()), view(("u",)), view(("u", "d")), view(("l",), done=True, won=True),
             view(("r",), done=True)]  # fmt: skip
    scores = ev.score(views, seed=0)
    raw = prm.score([view_to_trajectory(v) for v in views[1:3]])
    sig = [1 / (1 + pow(2.718281828459045, -x)) for x in raw]
    # root -> 0.5 (nothing to judge); env-ended nodes -> the env's outcome
    assert scores == pytest.approx([0.5, *sig, 1.0, 0.0], abs=1e-6)
    assert ev.num_scored == 2 and ev.uses_model
    assert RewardModelEvaluator(prm, use_env_outcome=False).score(views[3:4], seed=0) != [1.0]
    with pytest.raises(TypeError, match="score_steps"):
        RewardModelEvaluator(object())


def test_history_limited_prm_scores_one_sequence_per_node():
    prm = RewardModel.from_spec("tiny-0.1m", "prm", max_length=128, seed=4, max_history_steps=1)
    rows = []
    hook = prm.register_forward_hook(lambda _m, args, _o: rows.append(args[0].shape[0]))
    views = [view(("u", "d", "l", "r")), view(("u", "u", "d"))]
    scores = RewardModelEvaluator(prm).score(views, seed=0)
    hook.remove()
    full = prm.score_steps([view_to_trajectory(v) for v in views])
    assert scores == pytest.approx([1 / (1 + math.exp(-s[-1])) for s in full], abs=1e-6)
    assert rows[0] == 2  # two nodes, two sequences (score_steps would send 4 + 3)


@pytest.mark.parametrize(
    "algo, params",
    [
        ("beam-prm", {"num_beams": 4, "beam_width": 2}),
        ("mcts", {}),
        ("best-of-n", {"n": 3}),
    ],  # fmt: skip
)
def test_drives_search_algorithms(prm, algo, params):
    env = make("arborl/Maze-v0", short_actions=True)
    problem = Problem(env, ActionsProposer(), RewardModelEvaluator(prm), seed=5)
    res = run(problem, Budget(max_nodes=40, max_depth=3), seed=0, algo=algo, **params)
    values = [n.value for n in res.tree.nodes if n.value is not None]
    assert values and all(0.0 <= v <= 1.0 for v in values)
    assert res.stats["evaluator_calls"] >= 1


def test_search_command_takes_a_saved_rm_as_evaluator(prm, tmp_path):
    from arborl.cli.main import main

    rm_dir = prm.save_pretrained(tmp_path / "prm")
    out = tmp_path / "res.json"
    args = ["search", "--env", "arborl/Maze-v0", "--algo", "beam-prm", "--budget", "30",
            "--proposer", "actions", "--evaluator", f"rm:{rm_dir}", "--seed", "3",
            "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    import json

    doc = json.loads(out.read_text())
    # the RM scored the nodes (one evaluator call per expansion) and the node budget stopped it
    assert doc["stats"]["evaluator_calls"] > 0 and doc["stop_reason"] == "budget:max_nodes"
    with pytest.raises(SystemExit):  # argparse names the bad value and the choices
        main(["search", "--env", "arborl/Maze-v0", "--algo", "mcts", "--evaluator", "rmx"])
