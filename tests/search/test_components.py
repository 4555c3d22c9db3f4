"""Proposers, evaluators, GoT operations, the no-peeking rule and the HTML view."""

from __future__ import annotations

import arborl.envs as E
from arborl.envs.builtin.countdown import heuristic as countdown_value
from arborl.envs.builtin.maze import heuristic as maze_value
from arborl.envs.builtin.sokoban import heuristic as sokoban_value
from arborl.search import (
    ActionsProposer,
    Budget,
    FunctionEvaluator,
    FunctionProposer,
    LMProposer,
    PolicyJudgeEvaluator,
    Problem,
    RolloutEvaluator,
    heuristic_evaluator,
    make_search,
    run,
)
from arborl.search.got import Aggregate, Generate, KeepBest, Score
from arborl.search.html import render_html


def test_actions_proposer_is_distinct_seeded_and_avoids():
    from arborl.search.base import NodeView

    v = NodeView(0, (), "", "obs", available_actions=("u", "d", "l", "r"))
    p = ActionsProposer()
    (a,) = p.propose([v], 4, seeds=[1])
    (b,) = p.propose([v], 4, seeds=[1])
    assert [c.action for c in a] == [c.action for c in b]
    assert sorted(c.action for c in a) == ["d", "l", "r", "u"]
    (c,) = p.propose([v], 4, seeds=[1], avoid=[["u", "l"]])
    assert sorted(x.action for x in c) == ["d", "r"]
    assert all(x.prior == 0.25 for x in a)


def test_heuristics_read_the_observation():
    from arborl.search.base import NodeView

    def view(obs):
        return NodeView(0, (), "", obs)

    # 4 6 -> 4 * 6 = 24 is reachable; 1 1 cannot make 24.
    assert countdown_value(view("Numbers: 4 6. Target: 24.")) == 1.0
    assert countdown_value(view("Numbers: 1 1. Target: 24.")) == 0.0
    # A two cells from G in a corridor: 1 / (1 + 2)
    assert maze_value(view("A.G\n###")) == 1 / 3
    assert maze_value(view("A#G\n###")) == 0.0  # walled off
    # box at (1,2) one step from target (1,3), player adjacent: h = 1 + 0 -> 1/2
    assert sokoban_value(view("#####\n#@$.#\n#####")) == 0.5
    assert sokoban_value(view("####\n#$_#\n#_@#\n#_.#\n####")) == 0.0  # cornered box


def test_evaluators_never_see_the_hidden_answer():
    env = E.make("arborl/Wordle-v0")
    seen = []

    def record(v):
        seen.append(repr(v))
        return 0.5

    guesses = FunctionProposer(lambda v: ["guess[crane]", "guess[slate]", "guess[moist]"])
    p = Problem(env, guesses, FunctionEvaluator(record), seed=0)
    run(p, Budget(max_depth=3, max_nodes=30), seed=0, algo="tot-bfs", breadth=3, beam=2)
    secret = env.task["secret"]
    assert seen and secret not in ("crane", "slate", "moist")
    assert not any(secret in s for s in seen)  # the task dict never reaches a view


def test_got_aggregate_builds_a_graph():
    env = E.make("arborl/Maze-v0")
    p = Problem(env, ActionsProposer(), heuristic_evaluator("arborl/Maze-v0"), seed=1)
    p.stop_on_win = False
    got = make_search("got", program=[Generate(4), Aggregate(), Score(), KeepBest(3)], repeat=2)
    res = got.run(p, Budget(max_nodes=100), seed=0)
    merged = [n for n in res.tree.nodes if n.kind == "merged"]
    # Wall bumps (and undone moves) reach the same grid from different parents: merged.
    assert merged and all(n.pruned for n in merged)
    multi = [n for n in res.tree.nodes if n.extra_parents]
    assert multi and all(n.observation == res.tree[n.id].observation for n in multi)
    assert res.stats["op_counts"] == {"Generate": 2, "Aggregate": 2, "Score": 2, "KeepBest": 2}


def test_rollout_evaluator_charges_the_budget():
    env = E.make("arborl/Maze-v0")
    p = Problem(env, ActionsProposer(), RolloutEvaluator(max_steps=3), seed=2, stop_on_win=False)
    res = run(p, Budget(max_nodes=40), seed=0, algo="tot-bfs", breadth=4, beam=1)
    assert res.stats["rollout_steps"] > 0
    assert res.stats["nodes"] + res.stats["rollout_steps"] <= 40


def test_lm_proposer_and_judge_with_a_tiny_model():
    from arborl.agent import AgentConfig
    from arborl.generation import make_backend

    backend, tok = make_backend("tiny-0.1m", seed=0)
    agent = AgentConfig(memory="last_k", memory_k=0, include_instruction=False)
    prop = LMProposer(backend, tok, agent, max_new_tokens=2, oversample=3, diversity_note=True)
    judge = PolicyJudgeEvaluator(backend.model, tok)
    env = E.make("arborl/Maze-v0", short_actions=True)
    p = Problem(env, prop, judge, seed=0, stop_on_win=False)
    res = run(p, Budget(max_nodes=10), seed=0, algo="tot-bfs", breadth=3, beam=2)
    scored = [n for n in res.tree.nodes[1:] if n.value is not None]
    assert len(scored) >= 3  # the last level may be cut by the budget before scoring
    assert all(0.0 < n.value < 1.0 for n in scored)  # P(yes) / (P(yes) + P(no))
    for n in res.tree.nodes[1:]:
        assert n.response_ids and len(n.logprobs) == len(n.response_ids)
    for parent in res.tree.nodes:
        kids = [res.tree[c].action for c in parent.children]
        assert len(kids) == len(set(kids))  # distinct candidates per node
    # The diversity note puts the tried actions into the prompt text.
    v = res.tree.nodes[0]
    from arborl.search.base import NodeView

    with_note = prop.prompt_ids(NodeView(0, (), "", v.observation), avoid=["u"])
    assert len(with_note) > len(prop.prompt_ids(NodeView(0, (), "", v.observation)))


def test_distinct_lm_proposer_offers_k_actions_where_sampling_repeats_one():
    from arborl.agent import AgentConfig
    from arborl.generation import make_backend
    from arborl.search.base import NodeView

    backend, tok = make_backend("tiny-0.1m", seed=0)
    agent = AgentConfig(memory="last_k", memory_k=0, include_instruction=False)
    view = NodeView(0, (), "", E.make("arborl/Maze-v0", short_actions=True).reset(seed=0)[0])
    # Greedy decoding is the most confident policy: plain sampling repeats one action.
    plain = LMProposer(backend, tok, agent, max_new_tokens=2, temperature=0, oversample=3)
    (same,) = plain.propose([view], 3, seeds=[0])
    distinct = LMProposer(backend, tok, agent, max_new_tokens=2, temperature=0, distinct=True)
    (cands,) = distinct.propose([view], 3, seeds=[0])
    assert len(same) == 1 and len(cands) == 3
    assert len({c.response_ids[0] for c in cands}) == 3 and cands[0].action == same[0].action
    assert distinct.num_tokens == sum(len(c.response_ids) for c in cands)  # 3 samples' tokens
    distinct.token_cap = 3  # the budget stops the draws
    (capped,) = distinct.propose([view], 3, seeds=[0])
    assert sum(len(c.response_ids) for c in capped) <= 3 and len(capped) < 3


def test_html_view_is_self_contained():
    env = E.make("arborl/Game24-v0")
    p = Problem(env, ActionsProposer(), heuristic_evaluator("arborl/Game24-v0"), seed=0)
    res = run(p, Budget(max_nodes=50), seed=0, algo="mcts", width=5)
    page = render_html(res, title="t</script>")
    assert page.startswith("<!doctype html>") and "<script src" not in page
    assert "t&lt;/script&gt;" in page  # the title is escaped
    assert page.count("</script>") == 2  # the JSON cannot close its own script element


def test_html_data_block_survives_hostile_observations_and_nan():
    """An observation with `<!--` then `<script` (the tokenizer's double-escaped state) or a
    NaN value used to blank the page; the data block now holds no raw `<`, parses under
    strict JSON (as `JSON.parse` does) and reads back the same text, NaN by name."""
    import json
    import re

    env = E.make("arborl/Maze-v0")
    p = Problem(env, ActionsProposer(), heuristic_evaluator("arborl/Maze-v0"), seed=0)
    doc = run(p, Budget(max_nodes=10), seed=0, algo="mcts", width=4).to_dict()
    hostile = "<!-- scraped page <script>x</script> </SCRIPT > a & b \u2028"
    doc["tree"]["nodes"][1]["observation"] = hostile
    doc["tree"]["nodes"][1]["value"] = float("nan")
    page = render_html(doc)
    data = re.search(r'id="data">(.*?)</script>', page, re.S).group(1)
    assert "<" not in data and ">" not in data and "&" not in data
    assert page.count("</script>") == 2

    def strict(name):
        raise ValueError(f"JSON.parse rejects {name}")

    back = json.loads(data, parse_constant=strict)
    assert back["tree"]["nodes"][1]["observation"] == hostile
    assert back["tree"]["nodes"][1]["value"] == "NaN"


def test_html_script_builds_the_whole_tree_under_node(tmp_path):
    """Run the page's inline script under Node.js with a minimal DOM stand-in."""
    import json
    import re
    import shutil
    import subprocess

    import pytest

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    env = E.make("arborl/Maze-v0")
    p = Problem(env, ActionsProposer(), heuristic_evaluator("arborl/Maze-v0"), seed=0)
    res = run(p, Budget(max_nodes=40), seed=0, algo="mcts", width=4)
    page = render_html(res)
    data = re.search(r'id="data">(.*?)</script>', page, re.S).group(1)
    script = re.findall(r"<script>(.*?)</script>", page, re.S)[0]
    shim = """
    let count = 0, labels = [];
    function el(tag) { return { tag, children: [], style: {}, className: "", textContent: "",
      append(...xs) { this.children.push(...xs); }, appendChild(x) { this.children.push(x); },
      set onclick(f) { this._click = f; } }; }
    const byId = { tree: el("div"), data: { textContent: DATA } };
    const document = { getElementById: id => byId[id],
      createElement: tag => { const e = el(tag); if (tag === "li") count++; return e; } };
    """
    js = shim.replace("DATA", json.dumps(data.replace("<\\/", "</"))) + script
    js += "\nconsole.log(JSON.stringify({count}));"
    f = tmp_path / "page.js"
    f.write_text(js)
    out = subprocess.run([node, str(f)], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout)["count"] == len(res.tree)  # one <li> per node


def test_ranked_proposer_scores_every_legal_action():
    import math

    from arborl.agent import AgentConfig
    from arborl.generation import make_backend
    from arborl.models.scoring import token_logprobs
    from arborl.search import RankedActionsProposer
    from arborl.search.base import NodeView

    backend, tok = make_backend("tiny-0.1m", seed=0)
    agent = AgentConfig(memory="last_k", memory_k=0, include_instruction=False)
    ranked = RankedActionsProposer(LMProposer(backend, tok, agent))
    v = NodeView(0, (), "", "A.G", available_actions=("u", "d", "l", "r"))
    (cands,) = ranked.propose([v], 4, seeds=[0])
    assert sorted(c.action for c in cands) == ["d", "l", "r", "u"]
    assert math.isclose(sum(c.prior for c in cands), 1, abs_tol=1e-6)  # a float32 softmax
    assert [c.prior for c in cands] == sorted((c.prior for c in cands), reverse=True)
    # Each candidate's logprobs are the model's own: re-score one row by hand.
    import torch

    c = cands[0]
    ids = torch.tensor([c.prompt_ids + c.response_ids])
    lp = token_logprobs(backend.model, ids)[0, len(c.prompt_ids) - 1 :]
    assert lp.tolist() == [pytest_approx(x) for x in c.logprobs]
    (rest,) = ranked.propose([v], 4, seeds=[0], avoid=[[cands[0].action]])
    assert cands[0].action not in [x.action for x in rest] and len(rest) == 3


def pytest_approx(x):
    import pytest

    return pytest.approx(x, abs=1e-5)
