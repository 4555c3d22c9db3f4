"""Sharded checkpoints of the train group, and export of the policy as a plain HF folder.

A Ray-mode checkpoint is the local layout plus one folder:
  checkpoints/step-N/sharded/    `torch.distributed.checkpoint` files, one per rank
                                 (actor, its AdamW state, critic and its optimizer, the
                                 KL reference),
                                 and `scheduler.pt` written by rank 0
  checkpoints/step-N/policy/     the full policy in Hugging Face format (+ tokenizer and
                                 `arborl_agent.json`): what `arborl eval` / `arborl serve` load
  checkpoints/step-N/trainer_state.pt   the controller's state (step, generators, history)
Each rank writes only its own shards, and a resume may use the same number of ranks or
another one: DCP reshards on load. On several machines `trainer.output_dir` must be a
folder every node sees (NFS or similar), since each rank writes its shard there.
"""

from __future__ import annotations

from pathlib import Path

import torch

SHARDED = "sharded"
SCHEDULER_FILE = "scheduler.pt"


def _states(role) -> dict:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    model_sd, optim_sd = get_state_dict(role.model, role.opt)
    state = {"model": model_sd, "optim": optim_sd}
    if role.critic is not None:
        critic_sd, critic_optim_sd = get_state_dict(role.critic, role.critic_opt)
        state.update(critic=critic_sd, critic_optim=critic_optim_sd)
    if role.ref is not None:  # the SFT policy, which a resumed rank cannot rebuild
        state["reference"] = get_model_state_dict(role.ref)
    return state


def save_sharded(role, directory: Path) -> None:
    """Every rank writes its shards of `role`'s models and optimizers under `directory`."""
    import torch.distributed.checkpoint as dcp

    path = directory / SHARDED
    dcp.save(_states(role), checkpoint_id=str(path))
    if role.rank == 0:
        torch.save({"scheduler": role.sched.state_dict()}, path / SCHEDULER_FILE)


def load_sharded(role, directory: Path) -> None:
    """Load what `save_sharded` wrote into `role`'s (already sharded) models/optimizers."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    path = directory / SHARDED
    if not (path / ".metadata").exists():
        raise FileNotFoundError(
            f"{directory} has no sharded train state ({SHARDED}/.metadata); it was not "
            "written by trainer.engine=ray, resume it with trainer.engine=local"
        )
    state = _states(role)
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(
        role.model, role.opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    if role.critic is not None:
        set_state_dict(
            role.critic,
            role.critic_opt,
            model_state_dict=state["critic"],
            optim_state_dict=state["critic_optim"],
        )
    if role.ref is not None:
        set_model_state_dict(role.ref, state["reference"])
    sched = torch.load(path / SCHEDULER_FILE, weights_only=True)
    role.sched.load_state_dict(sched["scheduler"])


def export_hf(cfg, policy_path, state: dict, directory: Path, extra_files: dict[str, str]):
    """Write the full `state` as a plain HF causal-LM directory (LoRA merged)."""
    from arborl.distributed.sharding import load_numpy_state, state_to_numpy
    from arborl.models.loading import save_policy
    from arborl.train.build import build_policy

    model, tokenizer = build_policy(cfg, policy_path)
    load_numpy_state(model, state_to_numpy(state))
    save_policy(model, tokenizer, directory)
    for name, text in extra_files.items():
        (directory / name).write_text(text)
    return directory


def export_checkpoint(ckpt: str | Path, out: str | Path, cfg=None) -> Path:
    """Rebuild the full policy of a sharded checkpoint in one process (no process group)
    and save it as an HF directory: for a checkpoint whose `policy/` was not kept."""
    import torch.distributed.checkpoint as dcp

    from arborl.models.loading import save_policy
    from arborl.train.build import build_policy
    from arborl.train.config import load_train_config

    ckpt = Path(ckpt)
    if cfg is None:  # the run's resolved config, beside its checkpoints/
        cfg = load_train_config(files=[ckpt.parents[1] / "config.yaml"])
    model, tokenizer = build_policy(cfg, None)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=str(ckpt / SHARDED))
    model.load_state_dict(state["model"])
    return save_policy(model, tokenizer, out)
