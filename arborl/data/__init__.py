"""Data containers: `Batch` (tensors + metadata, batch-first) and the trajectory schema."""

from arborl.data.batch import Batch
from arborl.data.trajectory import (
    Step,
    Trajectory,
    iter_trajectories,
    read_trajectories,
    write_trajectories,
)

__all__ = [
    "Batch",
    "Step",
    "Trajectory",
    "iter_trajectories",
    "read_trajectories",
    "write_trajectories",
]
