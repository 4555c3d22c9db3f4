"""`bench/search_scaling.py` runs end to end at toy size and writes the keys the docs use."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "search_scaling.py"


def test_search_scaling_quick(tmp_path):
    out = tmp_path / "s.json"
    cmd = [
        sys.executable,
        str(BENCH),
        "--quick",
        "--proposer",
        "actions",
        "--algos",
        "mcts",
        "tot-bfs",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| algo | N=1 | N=4 |" in proc.stdout
    doc = json.loads(out.read_text())
    assert [(c["algo"], c["budget"]) for c in doc["cells"]] == [
        ("mcts", 1),
        ("mcts", 4),
        ("tot-bfs", 1),
        ("tot-bfs", 4),
    ]
    for c in doc["cells"]:  # the budget held: at most N x horizon env steps per task
        assert c["mean_nodes"] <= c["budget"] * doc["horizon"]
    assert out.with_suffix(".png").stat().st_size > 1000
