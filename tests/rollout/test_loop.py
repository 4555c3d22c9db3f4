"""The rollout loop with the real tiny model and the real Maze env: live-only generation,
groups, limits and truncation flags, invalid actions, policies and determinism."""

import itertools

import pytest
import torch

from arborl.agent import AgentConfig
from arborl.envs import EnvPool
from arborl.envs.builtin.maze import MazeEnv
from arborl.rollout import (
    OraclePolicy,
    RandomPolicy,
    RolloutConfig,
    run_episodes_with_policy,
    run_rollout,
)

MAZE = "arborl/Maze-v0"
AGENT = AgentConfig(include_instruction=False)


def test_generates_only_for_live_episodes(policy, backend):
    """Envs with turn limits 1..6 end one by one; each call carries exactly the live rows."""
    limits = itertools.count(1)
    pool = EnvPool(lambda: MazeEnv(max_turns=next(limits)), 6)
    cfg = RolloutConfig(group_size=1, max_new_tokens=4)
    res = run_rollout(backend, policy[1], pool, [1, 2, 3, 4, 5, 6], cfg, AGENT)
    turns = [len(ep.turns) for ep in res.episodes]
    assert turns == [1, 2, 3, 4, 5, 6]
    assert backend.prompts_per_call == [6, 5, 4, 3, 2, 1]
    assert res.stats["generate_calls"] == 6


def test_groups_share_tasks(policy, backend):
    cfg = RolloutConfig(group_size=3, max_new_tokens=3, max_turns=2)
    res = run_rollout(backend, policy[1], MAZE, [10, 11, 12], cfg, AGENT)
    by_group: dict[int, set] = {}
    for ep in res.episodes:
        by_group.setdefault(ep.group_id, set()).add(ep.task_id)
    assert sorted(by_group) == [0, 1, 2]
    assert all(len(tasks) == 1 for tasks in by_group.values())
    assert len(set.union(*by_group.values())) == 3
    assert len({ep.traj_id for ep in res.episodes}) == 9
    assert [t.meta["group_id"] for t in res.trajectories] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # Same task within a group means the same first observation.
    first = [ep.turns[0].observation for ep in res.episodes]
    assert first[0] == first[1] == first[2] != first[3]


def test_max_turns_above_the_envs_default_is_honoured():
    """Envs built from an id get the rollout's limit, also above their default (Maze: 16);
    a pool passed in keeps its envs' limits, which the rollout can only lower."""
    seeds = list(range(8))
    for limit, cap in [(40, 40), (5, 5), (None, 16)]:
        res = run_episodes_with_policy(RandomPolicy(0), MAZE, seeds, RolloutConfig(max_turns=limit))
        turns = [len(ep.turns) for ep in res.episodes]
        assert max(turns) == cap, (limit, turns)  # random moves rarely solve a maze
    pool = EnvPool(lambda: MazeEnv(max_turns=6), 8)
    res = run_episodes_with_policy(RandomPolicy(0), pool, seeds, RolloutConfig(max_turns=40))
    assert max(len(ep.turns) for ep in res.episodes) == 6


def test_max_turns_truncates(policy, backend):
    cfg = RolloutConfig(group_size=2, max_new_tokens=3, max_turns=3)
    res = run_rollout(backend, policy[1], MAZE, [0, 1], cfg, AGENT)
    for ep in res.episodes:
        if not ep.won:
            assert len(ep.turns) == 3 and ep.truncated and ep.truncation_reason == "max_turns"
            assert ep.turns[-1].truncated and not any(t.truncated for t in ep.turns[:-1])
    assert res.stats["truncated_rate"] > 0


def test_episode_token_budget(policy, backend):
    cfg = RolloutConfig(group_size=2, max_new_tokens=4, max_episode_tokens=10, max_turns=8)
    res = run_rollout(backend, policy[1], MAZE, [0, 1], cfg, AGENT)
    for ep in res.episodes:
        assert ep.generated_tokens <= 10
        if ep.truncation_reason == "episode_tokens":
            assert ep.generated_tokens == 10 and ep.turns[-1].truncated
    # 4 + 4 + 2: the untrained model rarely stops early, so the budget cuts the 3rd turn.
    cut = [ep for ep in res.episodes if ep.truncation_reason == "episode_tokens"]
    assert cut and any(t.finish_reason == "length" for t in cut[0].turns)


def test_step_view_left_truncates_long_prompts(policy, backend):
    cfg = RolloutConfig(group_size=1, max_new_tokens=2, max_turns=3, max_prompt_tokens=20)
    res = run_rollout(backend, policy[1], MAZE, [0, 1], cfg, AgentConfig())
    prompts = [t.prompt_ids for ep in res.episodes for t in ep.turns]
    assert all(len(p) == 20 for p in prompts)  # a maze prompt is ~50 tokens
    assert res.stats["prompt_truncations"] == len(prompts)
    assert all(t.prompt_truncated for ep in res.episodes for t in ep.turns)


def test_episode_view_ends_when_context_outgrows_limit(policy, backend):
    cfg = RolloutConfig(view="episode", max_new_tokens=3, max_turns=10, max_prompt_tokens=200)
    res = run_rollout(backend, policy[1], MAZE, [0], cfg, AGENT)
    (ep,) = res.episodes
    assert ep.truncation_reason == "prompt_tokens" and 1 < len(ep.turns) < 10
    assert all(len(t.prompt_ids) <= 200 for t in ep.turns)


def test_invalid_actions_counted(policy, backend):
    """The untrained model writes gibberish: every action is invalid, and the stats say so."""
    cfg = RolloutConfig(group_size=2, max_new_tokens=4, max_turns=3)
    res = run_rollout(backend, policy[1], MAZE, [0, 1], cfg, AGENT)
    valid = res.batch.meta["valid_action"]
    assert res.stats["invalid_action_rate"] == pytest.approx(1 - valid.mean())
    assert res.stats["invalid_action_rate"] > 0.5
    from arborl.envs.builtin.maze import parse_direction

    for ep in res.episodes:
        for t in ep.turns:
            assert t.valid_action == (parse_direction(t.action) is not None)


def test_oracle_and_random_policies():
    cfg = RolloutConfig(group_size=2)
    oracle = run_episodes_with_policy(OraclePolicy(), MAZE, [0, 1, 2], cfg, split="test")
    assert oracle.stats["success"] == 1.0 and oracle.stats["invalid_action_rate"] == 0.0
    assert oracle.batch is None and all(t.won for t in oracle.trajectories)
    rnd = run_episodes_with_policy(RandomPolicy(seed=0), MAZE, [0, 1, 2], cfg, split="test")
    assert rnd.stats["invalid_action_rate"] == 0.0  # drawn from available_actions
    assert all(
        s.action in ("up", "down", "left", "right") for t in rnd.trajectories for s in t.steps
    )


def test_same_seed_same_rollout(policy):
    from arborl.generation.hf import HFBackend

    model, tok = policy
    cfg = RolloutConfig(num_tasks=2, group_size=2, max_new_tokens=4, max_turns=3, seed=7)
    a = run_rollout(HFBackend(model, tok, seed=1), tok, MAZE, None, cfg, AGENT)
    b = run_rollout(HFBackend(model, tok, seed=2), tok, MAZE, None, cfg, AGENT)
    assert torch.equal(a.batch["input_ids"], b.batch["input_ids"])
    assert [t.task_id for t in a.trajectories] == [t.task_id for t in b.trajectories]


def test_react_format_passes_stop_string_and_parses(policy, backend):
    cfg = RolloutConfig(max_new_tokens=4, max_turns=2)
    res = run_rollout(backend, policy[1], MAZE, [0], cfg, AgentConfig(action_format="react"))
    assert backend.params[0].stop == ["</action>"]
    assert res.stats["format_ok_rate"] == 0.0  # 4 random chars never make an action block


def test_config_errors_name_the_field(policy, backend):
    with pytest.raises(ValueError, match=r"rollout\.view='tree'"):
        RolloutConfig(view="tree")
    with pytest.raises(ValueError, match=r"rollout\.max_turns=0"):
        RolloutConfig(max_turns=0)
    with pytest.raises(ValueError, match="memory must be 'full'"):
        run_rollout(
            backend,
            policy[1],
            MAZE,
            [0],
            RolloutConfig(view="episode"),
            AgentConfig(memory="last_k"),
        )
    with pytest.raises(ValueError, match="num_tasks x group_size"):
        run_rollout(backend, policy[1], EnvPool(MAZE, 3), [0, 1], RolloutConfig(), AGENT)


def test_prompts_are_rendered_once_per_state(policy, backend, monkeypatch):
    """Episodes of a group start in the same state: the chat template renders that prompt
    once per rollout, and every episode gets the ids `build_prompt` gives."""
    import arborl.rollout.policies as policies
    from arborl.agent import build_prompt, make_memory

    _, tok = policy
    calls = []
    real = policies.build_prompt

    def spy(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(policies, "build_prompt", spy)
    cfg = RolloutConfig(num_tasks=2, group_size=4, max_turns=1, max_new_tokens=2, seed=0)
    res = run_rollout(backend, tok, MAZE, None, cfg, AGENT)
    assert len(calls) == 2  # 8 episodes, 2 tasks, one turn each
    for ep in res.episodes:
        first = ep.turns[0]
        expected = build_prompt(tok, first.observation, make_memory(AGENT), "", AGENT)
        assert first.prompt_ids == expected
