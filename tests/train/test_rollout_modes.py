"""Rollout modes: one registry, one signature, checked by the train config."""

from __future__ import annotations

from dataclasses import replace

import pytest

from arborl.train.config import load_train_config
from arborl.train.rollout_modes import ROLLOUT_MODES, check_rollout_mode, rollout_step


def test_modes_and_config_checks():
    assert ROLLOUT_MODES.names() == ["agent", "flat", "tree"]
    cfg = load_train_config(["rollout.mode=tree", "search.algo=mcts", "search.budget=5"])
    assert (cfg.search.algo, cfg.search.budget, cfg.search.tree_adv) == ("mcts", 5, "mc_sibling")
    with pytest.raises(ValueError, match=r"rollout.mode='tre' is not one of: agent, flat, tree"):
        load_train_config(["rollout.mode=tre"])
    with pytest.raises(ValueError, match=r"rollout.mode='tree' needs view in \['step'\]"):
        check_rollout_mode(replace(cfg.rollout, view="episode"))
    with pytest.raises(ValueError, match=r"rollout.async_envs=true is for rollout.mode='flat'"):
        load_train_config(["rollout.mode=tree", "rollout.async_envs=true"])
    assert load_train_config(["rollout.async_envs=true"]).rollout.async_envs is True
    with pytest.raises(ValueError, match=r"search.budget=0 must be an int >= 1"):
        load_train_config(["search.budget=0"])
    with pytest.raises(ValueError, match=r"search.evaluator='judge' is not one of"):
        load_train_config(["search.evaluator=judge"])
    with pytest.raises(ValueError, match=r"unknown config key 'rollout.search_algo'"):
        load_train_config(["rollout.search_algo=mcts"])  # the old key is gone


def test_rollout_step_calls_the_configured_mode():
    calls = []

    def fake(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split):
        calls.append((seeds, rollout_cfg.seed, cfg.search.algo, split))
        return "result"

    ROLLOUT_MODES.register("fake-test", fake)
    try:
        cfg = load_train_config(["search.algo=mcts"])
        cfg.rollout.mode = "fake-test"
        step_cfg = replace(cfg.rollout, seed=7)
        res = rollout_step(
            None, None, None, seeds=[1, 2], rollout_cfg=step_cfg, cfg=cfg, split="train"
        )
        assert res == "result"
        assert calls == [([1, 2], 7, "mcts", "train")]
    finally:
        ROLLOUT_MODES.unregister("fake-test")


def test_episode_view_is_refused_at_start_not_at_the_first_step():
    """D6: the config accepted view=episode, memory=full; step 1 raised KeyError."""
    with pytest.raises(ValueError, match=r"rollout.view='episode' .* set rollout.view=step"):
        load_train_config(["rollout.view=episode", "agent.memory=full"])
    assert load_train_config(["rollout.view=step"]).rollout.view == "step"


def test_train_pool_builds_envs_with_the_rollouts_turn_limit():
    """rollout.max_turns above the env's default (Maze: 16) reaches the envs themselves."""
    from arborl.train.build import build_train_pool

    for limit, expected in [(40, 40), (None, 16)]:
        sets = [] if limit is None else [f"rollout.max_turns={limit}"]
        pool = build_train_pool(load_train_config(sets), num_envs=2)
        try:
            assert [env.max_turns for env in pool] == [expected, expected]
        finally:
            pool.close()
