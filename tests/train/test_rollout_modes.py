"""Rollout modes: one registry, one signature, checked by the train config."""

from __future__ import annotations

from dataclasses import replace

import pytest

from arborl.config import ConfigError
from arborl.train.config import load_train_config
from arborl.train.rollout_modes import (
    ROLLOUT_MODES,
    RolloutMode,
    check_rollout_mode,
    register_rollout_mode,
    rollout_step,
)


def test_modes_and_config_checks():
    assert ROLLOUT_MODES.names() == ["agent", "flat", "tree"]
    cfg = load_train_config(["rollout.mode=tree", "search.algo=mcts", "search.budget=5"])
    assert (cfg.search.algo, cfg.search.budget, cfg.search.tree_adv) == ("mcts", 5, "mc_sibling")
    with pytest.raises(ValueError, match=r"rollout.mode='tre' is not one of: agent, flat, tree"):
        load_train_config(["rollout.mode=tre"])
    with pytest.raises(ValueError, match=r"rollout.mode='tree' needs view in \['step'\]"):
        check_rollout_mode(replace(cfg.rollout, view="episode"))
    with pytest.raises(
        ValueError, match=r"rollout.async_envs=true needs a mode .*\(rollout.mode in \['flat'\]\)"
    ):
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

    register_rollout_mode(RolloutMode("fake-test", fake))
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


def test_the_records_declare_what_the_modes_did_by_name_and_attribute():
    flat, tree, agent = (ROLLOUT_MODES.get(n) for n in ("flat", "tree", "agent"))
    assert (flat.async_envs, tree.async_envs, agent.async_envs) == (True, False, False)
    assert (flat.views, tree.views, agent.views) == (("step", "episode"), ("step",), ("step",))
    assert (flat.section, tree.section, agent.section) == (None, "search", "agent_program")
    assert agent.evaluate_share == "arborl.train.agent_eval:evaluate_agent_share"
    assert flat.evaluate_share is None and tree.evaluate_share is None


def test_an_action_mode_without_a_capability_the_rollout_mode_needs_fails_at_load():
    """Before: a check of the names `score` and `flat` (train/config.py), whose message did
    not name the capability; now the records are asked and the error lists the fixes."""
    for mode, capability in [("tree", "supports_tree"), ("agent", "supports_programs")]:
        sets = [f"rollout.mode={mode}", "agent.action_mode=score", "agent_program.fn=m:f"]
        with pytest.raises(ConfigError) as e:
            load_train_config(sets)
        assert str(e.value) == (
            f"rollout.mode={mode!r} needs an action mode with {capability}, and "
            "agent.action_mode='score' has not: set agent.action_mode to one of ['generate'] "
            "or rollout.mode to one of ['flat']"
        )
    assert load_train_config(["agent.action_mode=score"]).agent.action_mode == "score"
    with pytest.raises(ConfigError, match=r"rollout.mode=agent runs an agent program you"):
        load_train_config(["rollout.mode=agent"])  # the agent mode's own check
    with pytest.raises(ValueError, match=r"needs_action=\['supports_trees'\] are not ActionMode"):
        register_rollout_mode(RolloutMode("typo", print, needs_action=("supports_trees",)))
    assert "typo" not in ROLLOUT_MODES


def test_the_vllm_engine_refuses_an_action_mode_that_needs_a_local_model():
    from arborl.train.vllm_engine import VLLMEngine

    cfg = load_train_config(["agent.action_mode=score"])
    with pytest.raises(ConfigError) as e:
        VLLMEngine.check_config(cfg)
    assert str(e.value).startswith(
        "agent.action_mode='score' needs a local model (it runs the policy's forward pass), "
        "and the vLLM engine only generates: set agent.action_mode to one of ['generate']"
    )
    VLLMEngine.check_config(load_train_config([]))  # generate: nothing to refuse
