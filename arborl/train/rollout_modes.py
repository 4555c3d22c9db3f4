"""TEMPORARY stand-in (replaced by the registry version on merge)."""

from __future__ import annotations


def rollout_step(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split):
    from arborl.rollout import run_rollout

    if cfg.rollout.mode == "tree":
        from arborl.search.training import tree_rollout

        return tree_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent, split=split)
    return run_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent, split=split)
