"""`arborl sft [key=value ...]`: only the SFT warm start of `arborl train`, as its own run.

It reads the same `TrainConfig` (the model, env, agent, sft and eval sections matter) and
calls the same `arborl.train.sft.warm_start` that `arborl train` runs before RL, so a
policy trained here is the one `arborl train` would start RL from. The run folder gets
config.yaml, metrics.jsonl (the SFT loss of every step), the policy in HF format under
`checkpoints/sft/policy` and summary.json with the held-out success. Continue with RL:

    arborl sft trainer.name=warm sft.steps=200
    arborl train model.name_or_path=runs/warm/checkpoints/sft/policy sft.enabled=false
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from arborl.config import ConfigError, to_dict
    from arborl.train.config import load_train_config

    overrides = list(args.overrides)
    if args.out:
        out = Path(args.out)
        overrides += [f"trainer.output_dir={out.parent}", f"trainer.name={out.name}"]
    try:
        cfg = load_train_config(overrides, files=args.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch

    from arborl.generation.hf import HFBackend
    from arborl.models import apply_lora, load_policy, save_policy
    from arborl.train.evaluate import evaluate_policy
    from arborl.train.runlog import MetricsLogger, RunDir
    from arborl.train.sft import warm_start

    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    run = RunDir.create(cfg.trainer.output_dir, cfg.trainer.name, cfg)
    logger = MetricsLogger(
        run,
        total=cfg.sft.steps,
        desc="SFT",
        keys=("sft/loss",),
        disable_bar=not cfg.trainer.progress,
    )
    try:
        model, tokenizer = load_policy(
            cfg.model.name_or_path, dtype=cfg.model.dtype, seed=cfg.model.seed
        )
        if cfg.model.lora_rank:
            model = apply_lora(model, r=cfg.model.lora_rank, alpha=cfg.model.lora_alpha)
        stats = warm_start(model, tokenizer, cfg, logger, log_steps=True)
        policy_dir = save_policy(model, tokenizer, run.path / "checkpoints" / "sft" / "policy")
        (policy_dir / "arborl_agent.json").write_text(json.dumps(to_dict(cfg.agent), default=str))
        model.eval()
        backend = HFBackend(model, tokenizer, max_batch_size=128)
        after = evaluate_policy(
            backend,
            tokenizer,
            cfg.env.id,
            cfg.env.kwargs,
            cfg.agent,
            cfg.rollout,
            cfg.eval,
            split=cfg.env.eval_split,
        )
        logger.log(cfg.sft.steps, {f"eval/final_{k}": v for k, v in after.items()})
        summary = {
            "sft": stats,
            "after": after,
            "policy": str(policy_dir),
            "run_dir": str(run.path),
        }
        (run.path / "summary.json").write_text(json.dumps(summary, indent=2))
    finally:
        logger.close()
        run.close()
    print(
        f"\nrun: {run.path}  ({cfg.sft.steps} SFT steps, final loss {stats.get('sft/loss', float('nan')):.4f})"
    )
    print(f"policy: {policy_dir}")
    from arborl.train.evaluate import format_success

    print(format_success("held-out success after SFT", after))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sft",
        help="SFT warm start only (oracle demos or a trajectory file), saved for `arborl train`",
        description="Supervised fine-tuning on oracle demos of env.train_split (or the "
        "trajectory file sft.demos), with the same config keys as `arborl train`; then a "
        "held-out evaluation. The policy is saved to <run>/checkpoints/sft/policy; start RL "
        "from it with `arborl train model.name_or_path=<that dir> sft.enabled=false`.",
    )
    p.add_argument("overrides", nargs="*", help="key=value overrides or group=name selections")
    p.add_argument("--config", action="append", help="a YAML config file (repeatable)")
    p.add_argument(
        "--out", default=None, help="run directory (default: trainer.output_dir/trainer.name)"
    )
    p.set_defaults(func=_run)
