"""Search with a real byte-level BPE policy (the `bpe-tiny-0.1m` preset, GPT-2 + ChatML).

Search trees keep every node's prompt and sampled tokens so they can be trained on; with
BPE a node's decoded text does not re-encode to its ids, so the rows must hold exactly what
the backend was sent and sampled, and their logprobs must rescore.
"""

import json

import pytest
import torch

from arborl.agent import AgentConfig
from arborl.cli.main import main
from arborl.envs import EnvPool
from arborl.generation import HFBackend
from arborl.models import load_policy, token_logprobs
from arborl.rollout import RolloutConfig
from arborl.search.config import SearchConfig
from arborl.search.training import tree_rollout


class RecordingBackend(HFBackend):
    """The HF backend, keeping each (prompt ids, completion) it served."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.served = []

    def generate(self, prompts, params):
        out = super().generate(prompts, params)
        self.served += [(list(p), c) for p, c in zip(prompts, out)]
        return out


@pytest.mark.parametrize(
    ("algo", "params"), [("tot-bfs", {"breadth": 2, "beam": 2}), ("mcts", {"width": 2})]
)
def test_tree_rollout_rows_are_the_sampled_ids_with_bpe(algo, params):
    model, tok = load_policy("bpe-tiny-0.1m", seed=0)
    model.eval()
    backend = RecordingBackend(model, tok, seed=0)
    pool = EnvPool("arborl/Maze-v0", 2, short_actions=True)
    cfg = RolloutConfig(num_tasks=2, max_new_tokens=8, max_turns=3, mode="tree")
    search = SearchConfig(algo=algo, budget=6, params=params)
    agent = AgentConfig(memory="last_k", memory_k=1)
    res = tree_rollout(backend, tok, pool, [1, 2], cfg, search, agent)
    b, p_len = res.batch, res.batch.info["prompt_length"]
    assert len(b) == 12 and b.info["view"] == "step"  # 2 trees x 6 nodes
    served = {}
    for p, c in backend.served:
        served.setdefault(tuple(p), []).append((c.token_ids, c.logprobs))
    drifted = 0
    for r in range(len(b)):
        row = b["input_ids"][r, b["attention_mask"][r].bool()].tolist()
        a = int(b["response_mask"][r].sum())
        prompt, ids = row[: len(row) - a], row[len(row) - a :]
        logps = b["old_logp"][r, :a].tolist()
        assert any(ids == s and torch.allclose(torch.tensor(logps), torch.tensor(lp))
                   for s, lp in served[tuple(prompt)])  # fmt: skip
        drifted += tok.encode(tok.decode(ids), add_special_tokens=False) != ids
    assert drifted >= 1  # BPE drift was there to be caught
    with torch.no_grad():
        scored = token_logprobs(model, b["input_ids"], b["attention_mask"])[:, p_len - 1 :]
    diff = (scored - b["old_logp"]) * b["response_mask"]
    assert float(diff.abs().max()) < 1e-5


@pytest.mark.parametrize(("algo", "evaluator"), [("tot-bfs", "heuristic"), ("mcts", "judge")])
def test_arborl_search_with_a_bpe_preset(tmp_path, algo, evaluator):
    out = tmp_path / "maze.json"
    args = ["search", "--policy", "bpe-tiny-0.1m", "--env", "arborl/Maze-v0", "--algo", algo,
            "--budget", "6", "--max-new-tokens", "4", "--out", str(out), "--no-html",
            "--evaluator", evaluator,  # judge: the policy's P("y") vs P("n"), one token each
            "--param", "breadth=2" if algo == "tot-bfs" else "width=2"]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["stats"]["tokens"] > 0 and doc["stats"]["model_calls"] >= 1
    assert doc["stats"]["nodes"] == 6 and doc["stop_reason"] == "budget:max_nodes"
    if evaluator == "judge":  # a probability from the BPE model's two answer tokens
        assert all(0 < n["value"] < 1 for n in doc["tree"]["nodes"][1:])
