"""Tree -> per-node advantages (hand-computed) -> Batch rows; `rollout.mode=tree` training."""

from __future__ import annotations

import json
import math

import pytest
import torch

from arborl.rollout.batching import build_step_batch
from arborl.search import Node, SearchTree
from arborl.search.export import node_values, tree_advantages, tree_episodes


def trees_to_batch(trees, pad_token_id, mode="mc_value"):
    """The step-layout Batch of the trees' episodes, `adv` = each row's node advantage."""
    episodes = tree_episodes(trees, mode)
    if not episodes:
        raise ValueError("the trees have no non-root nodes: nothing to train on")
    batch = build_step_batch(episodes, pad_token_id)
    batch["adv"] = batch.tensors["step_reward"].clone()
    batch["node_value"] = torch.tensor([ep.turns[0].info["node_value"] for ep in episodes])
    return batch


def hand_tree() -> SearchTree:
    """7 nodes:            0
                        /     \\
                       1       2
                     /  \\    /  \\
                    3    4   5    6
    leaves 3..6 are finished with returns 1, 0, 0, 0; node 6 is unfinished with value 0.5
    (bootstrapped). Every non-root node carries a 2-token prompt and a 1-token response."""
    t = SearchTree()
    t.add(Node(id=0, parent=None, path=(), depth=0, observation="s0", kind="root"))
    spec = [
        (1, 0, 0.0, False, None),
        (2, 0, 0.0, False, None),
        (3, 1, 1.0, True, None),
        (4, 1, 0.0, True, None),
        (5, 2, 0.0, True, None),
        (6, 2, 0.0, False, 0.5),
    ]
    for i, parent, ret, done, value in spec:
        n = Node(
            id=i,
            parent=parent,
            path=(*t[parent].path, len(t[parent].children)),
            depth=t[parent].depth + 1,
            observation=f"s{i}",
            action=f"a{i}",
            reward=ret,
            ret=ret,
            done=done,
            terminated=done,
            won=ret == 1.0,
            value=value,
            prompt_ids=[5, 6],
            response_ids=[7 + i],
            logprobs=[-0.5],
        )
        t.add(n)
    return t


def test_node_values_by_hand():
    v, leaves = node_values(hand_tree())
    # V(3)=1, V(4)=0, V(5)=0, V(6)=0+0.5 (bootstrap); V(1)=(1+0)/2=0.5,
    # V(2)=(0+0.5)/2=0.25, V(0)=(1+0+0+0.5)/4=0.375
    assert v == pytest.approx([0.375, 0.5, 0.25, 1.0, 0.0, 0.0, 0.5])
    assert leaves == [4, 2, 2, 1, 1, 1, 1]
    v_nb, _ = node_values(hand_tree(), bootstrap=False)
    assert v_nb[6] == 0.0 and v_nb[0] == pytest.approx(0.25)


def test_advantages_by_hand():
    t = hand_tree()
    mc = tree_advantages(t, "mc_value")
    # V(n) - V(parent): 1: 0.5-0.375=0.125, 2: 0.25-0.375=-0.125, 3: 1-0.5=0.5,
    # 4: 0-0.5=-0.5, 5: 0-0.25=-0.25, 6: 0.5-0.25=0.25
    assert [mc[i] for i in range(1, 7)] == pytest.approx([0.125, -0.125, 0.5, -0.5, -0.25, 0.25])
    sib = tree_advantages(t, "sibling", eps=0.0)
    # siblings {1,2}: values 0.5, 0.25, mean 0.375, std 0.125 -> +1, -1; {3,4}: 1, 0 ->
    # +1, -1; {5,6}: 0, 0.5 -> -1, +1
    assert [sib[i] for i in range(1, 7)] == pytest.approx([1, -1, 1, -1, -1, 1])
    both = tree_advantages(t, "mc_sibling", eps=0.0)
    assert [both[i] for i in range(1, 7)] == pytest.approx([1, -1, 1, -1, -1, 1])
    rl = tree_advantages(t, "treerl")
    # ((V - V_root) + (V - V_parent)) / sqrt(leaves): node 1: (0.125 + 0.125)/sqrt2,
    # node 3: (0.625 + 0.5)/1 = 1.125, node 6: (0.125 + 0.25)/1 = 0.375
    assert rl[1] == pytest.approx(0.25 / math.sqrt(2))
    assert rl[3] == pytest.approx(1.125) and rl[6] == pytest.approx(0.375)
    with pytest.raises(ValueError, match="is not one of"):
        tree_advantages(t, "gae")


def test_trees_to_batch_rows():
    b = trees_to_batch([hand_tree(), hand_tree()], pad_token_id=0, mode="mc_value")
    assert len(b) == 12
    assert b.info["view"] == "step" and b.info["prompt_length"] == 2
    assert b.tensors["adv"][:6].tolist() == pytest.approx([0.125, -0.125, 0.5, -0.5, -0.25, 0.25])
    assert torch.equal(b.tensors["adv"], b.tensors["step_reward"])
    assert list(b.meta["group_id"][:6]) == ["0:0", "0:0", "0:1", "0:1", "0:2", "0:2"]
    assert b.meta["group_id"][6] == "1:0"  # groups never mix trees
    assert b.tensors["input_ids"][2].tolist() == [5, 6, 10]  # node 3: prompt + response
    assert b.tensors["node_value"][:3].tolist() == pytest.approx([0.5, 0.25, 1.0])
    root_only = SearchTree()
    root_only.add(Node(id=0, parent=None, path=(), depth=0, observation="s"))
    with pytest.raises(ValueError, match="nothing to train on"):
        trees_to_batch([root_only], 0)


def test_a_tree_without_tokens_cannot_be_exported():
    t = hand_tree()
    t[4].response_ids = None
    with pytest.raises(ValueError, match="only trees grown by an LM proposer"):
        trees_to_batch([t], 0)


def test_train_with_tree_rollouts(tmp_path):
    from arborl.cli.main import main

    args = [
        "train",
        "model.name_or_path=tiny-0.1m",
        "env=maze",
        "sft.enabled=false",
        "rollout.num_tasks=2",
        "rollout.group_size=1",
        "rollout.max_turns=4",
        "rollout.max_new_tokens=2",
        "rollout.mode=tree",
        "search.algo=tot-bfs",
        "search.budget=6",
        "search.params={breadth: 2, beam: 1}",
        "eval.num_episodes=2",
        "trainer.progress=false",
        "trainer.total_steps=2",
        "trainer.plots=false",
        "algo.drop_zero_adv=false",
        f"trainer.output_dir={tmp_path}",
        "trainer.name=tree",
    ]
    assert main(args) == 0
    recs = [json.loads(x) for x in (tmp_path / "tree" / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in recs if "train/success" in r]
    assert len(rl) == 2
    # 2 trees x 6 nodes each = 12 rows per step, every one with a tree advantage.
    assert all(r["train/env_steps"] in (12.0, 24.0) for r in rl)
    assert all(r["actor/optimizer_steps"] >= 1 for r in rl)
    # The report embeds the search-tree view of each step's first tree (steps 0 and 1).
    html = (tmp_path / "tree" / "report.html").read_text()
    data = json.loads(html.split('id="report-data">')[1].split("</script>")[0])
    names = [t["name"].split(", task ")[0] for t in data["trees"]]
    assert names == ["step 0", "step 1"]
    assert all("<title>arborl search: step" in t["html"] for t in data["trees"])


def test_tree_rollout_rows_are_sibling_normalised():
    from collections import defaultdict

    from arborl.agent import AgentConfig
    from arborl.envs import EnvPool
    from arborl.generation import make_backend
    from arborl.rollout import RolloutConfig
    from arborl.search.config import SearchConfig
    from arborl.search.training import tree_rollout

    backend, tok = make_backend("tiny-0.1m", seed=0)
    pool = EnvPool("arborl/Maze-v0", 2, short_actions=True)
    cfg = RolloutConfig(num_tasks=2, max_new_tokens=2, mode="tree")
    search = SearchConfig(algo="tot-bfs", budget=10, params={"breadth": 2, "beam": 2})
    agent = AgentConfig(memory="last_k", memory_k=0, include_instruction=False)
    res = tree_rollout(backend, tok, pool, [1, 2], cfg, search, agent)
    b = res.batch
    assert len(b) == 20 and b.info["view"] == "step"  # 2 trees x 10 nodes
    groups = defaultdict(list)
    for g, r in zip(b.meta["group_id"], b.tensors["step_reward"].tolist()):
        groups[g].append(r)
    for rewards in groups.values():  # mc_sibling: z-scores within each sibling group
        assert sum(rewards) == pytest.approx(0.0, abs=1e-5)
    assert set(b.meta["traj_id"]) == {f"tree{t}-n{i}" for t in (0, 1) for i in range(1, 11)}
    assert res.stats["episodes"] == 2.0 and 0.0 <= res.stats["success"] <= 1.0
