"""The `ray` section of `arborl train`'s config (`trainer.engine=ray`): workers, ranks,
placement and the one-step-off overlap. Kept beside `arborl.train.config`, which composes it
into `TrainConfig`, so that file stays one screenful per component."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class RayConfig:
    """The Ray engine's settings (`trainer.engine=ray`, `arborl.distributed`)."""

    num_train_ranks: int = field(default=1, metadata={"min": 1})
    """Ranks of the train group (one torch.distributed process group that shards actor,
    critic and reference with FSDP2; gloo on CPU, NCCL on GPU)."""
    num_rollout_workers: int = field(default=1, metadata={"min": 1})
    """Rollout workers, each with its own generation backend and an equal share of the
    tasks (colocated placement uses the train ranks, so it must equal num_train_ranks)."""
    placement: Literal["split", "colocated"] = "split"
    """"split" puts rollout workers and train ranks in separate actors of one Ray
    placement group; "colocated" runs rollout inside the train ranks' processes."""
    one_step_off: bool = False
    """Roll out step k+1 with the weights before update k while update k runs (one step
    stale, logged as async/staleness); False keeps rollout on-policy."""
    address: str | None = None
    """Address of a running Ray cluster ("auto" or "HOST:6379", from `ray start
    --head`); None starts a private local Ray instance."""
    cpus_per_worker: float = field(default=0.5, metadata={"min": 0.0})
    """CPUs Ray reserves for each rollout worker and train rank."""
    gpus_per_rank: float = field(default=0.0, metadata={"min": 0.0})
    """GPUs per train rank (and split-placement rollout worker); > 0 puts the models on
    CUDA and the train group on NCCL with bf16 mixed precision."""
    max_worker_restarts: int = field(default=3, metadata={"min": 0})
    """A rollout worker that dies is replaced and its share re-run, at most this many
    times over the run. A worker lost with its node is replaced on a live node."""
    train_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each train rank's bundle also asks for, to pin the train group
    to chosen nodes: {head_node: 0.01} runs it only on nodes started with `ray start
    --resources '{"head_node": 1}'`. Empty: any node."""
    rollout_resources: dict[str, float] = field(default_factory=dict)
    """The same for each rollout worker ({worker_node: 0.01}). A worker whose node is lost
    is re-placed on a live node with these resources, or on any live node if none has them."""
