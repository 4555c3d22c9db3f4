"""Masked statistics, and the rule that arborl.algos imports nothing above it."""

import ast
from pathlib import Path

import pytest
import torch

import arborl.algos
from arborl.algos import masked_mean, masked_var, masked_whiten


def test_masked_stats_by_hand():
    # valid values (1, 3, 5): mean 3, unbiased var = (4 + 0 + 4) / 2 = 4; 100 is masked
    x = torch.tensor([[1.0, 100.0, 3.0], [5.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 0, 1], [1, 0, 0]])
    assert float(masked_mean(x, mask)) == 3.0
    assert float(masked_var(x, mask)) == 4.0
    # per-row mean: (1 + 3) / 2 = 2 and 5
    torch.testing.assert_close(masked_mean(x, mask, dim=-1), torch.tensor([2.0, 5.0]))
    # whitened: (x - 3) / 2 -> (-1, 0, 1) at valid positions, 0 elsewhere
    white = masked_whiten(x, mask, eps=0.0)
    torch.testing.assert_close(white, torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    # shift_mean=False keeps the mean: (x - 3) / 2 + 3
    kept = masked_whiten(x, mask, shift_mean=False, eps=0.0)
    torch.testing.assert_close(kept, torch.tensor([[2.0, 0.0, 3.0], [4.0, 0.0, 0.0]]))


@pytest.mark.parametrize("path", sorted(Path(arborl.algos.__file__).parent.glob("*.py")))
def test_algos_imports_only_torch_numpy_and_itself(path):
    allowed = ("arborl.algos", "torch", "numpy", "__future__", "collections", "dataclasses")
    allowed += ("typing", "math")
    allowed += ("arborl.registry",)  # the stdlib-only registry helper sits below algos
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        for name in names:
            assert name.startswith(allowed), f"{path.name} imports {name}"
