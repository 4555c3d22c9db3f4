"""Ray mode: a single controller over rollout workers and an FSDP2-sharded train group.

    arborl train trainer.engine=ray ray.num_train_ranks=2 ray.num_rollout_workers=2

`RayEngine` (the engine `RLTrainer` composes when `trainer.engine=ray`, see
`arborl.distributed.engine`) runs the model work of the one RL loop from a driver that
holds no weights; `WorkerGroup` + `register` declare how
Batches are split across workers; `workers` holds the train-rank and rollout roles;
`checkpoint` the sharded save/resume and the HF export. See docs/distributed.md.
"""

from arborl.distributed.dispatch import COLLECT_MODES, DISPATCH_MODES, WorkerGroup, register

__all__ = ["COLLECT_MODES", "DISPATCH_MODES", "WorkerGroup", "register"]
