"""Preference pairs and Monte-Carlo step labels from trajectories (real Maze envs)."""

from __future__ import annotations

import math

import pytest

from arborl.data.trajectory import Step, Trajectory
from arborl.envs import make
from arborl.envs.builtin.maze import MazeEnv
from arborl.rewards.rm_data import (
    MixedPolicy,
    PreferencePair,
    StepLabels,
    build_preference_pairs,
    make_data_policy,
    monte_carlo_sibling_labels,
    monte_carlo_step_labels,
    read_pairs,
    read_step_labels,
    replay,
    similarity,
    write_jsonl,
)
from arborl.rollout import OraclePolicy, RandomPolicy, RolloutConfig, run_episodes_with_policy
from arborl.rollout.policies import Decision

KW = {"short_actions": True}


def traj(task: str, actions: str, ret: float, env: str = "e") -> Trajectory:
    steps = [Step(observation=f"o{i}", action=a) for i, a in enumerate(actions)]
    if steps:
        steps[-1].reward = ret
    return Trajectory(task_id=task, env_id=env, steps=steps, won=ret > 0)


def test_similarity_is_difflib_ratio_over_actions():
    # matching blocks "u","d" -> 2 * 2 / (3 + 3) = 0.6667
    assert similarity(traj("t", "udl", 0), traj("t", "udr", 0)) == pytest.approx(4 / 6)
    assert similarity(traj("t", "ud", 0), traj("t", "ud", 1)) == 1.0


def test_pairs_within_task_ties_and_duplicates_dropped():
    trajs = [
        traj("a", "uu", 1.0),  # winner
        traj("a", "dddd", 0.0),  # loser
        traj("a", "DDDD", 0.0),  # exact repeat of the loser (normalised): collapsed
        traj("a", "lr", 1.0),  # tie with the first winner: no pair between them
        traj("b", "rrrr", 0.0),  # another task: never paired with task a
        traj("b", "r", 2.0),
    ]
    pairs = build_preference_pairs(trajs)
    # task a: {uu, lr} x {dddd} = 2 pairs; task b: 1 pair (margin 2)
    assert len(pairs) == 3
    assert all(p.chosen.total_return > p.rejected.total_return for p in pairs)
    assert sorted((p.task_id, p.margin) for p in pairs) == [("a", 1.0), ("a", 1.0), ("b", 2.0)]
    assert {tuple(s.action for s in p.rejected.steps) for p in pairs if p.task_id == "a"} == {
        ("d", "d", "d", "d")
    }


def test_near_duplicate_pairs_dropped_by_similarity():
    # "udlrudlr" vs "udlrudll": 7 of 8 actions match -> ratio 0.875
    a, b = traj("t", "udlrudlr", 1.0), traj("t", "udlrudll", 0.0)
    assert len(build_preference_pairs([a, b], max_similarity=0.9)) == 1
    assert build_preference_pairs([a, b], max_similarity=0.8) == []


def test_max_pairs_per_task_is_a_seeded_subset():
    trajs = [traj("t", "u" * (i + 1), float(i)) for i in range(6)]  # 15 pairs
    assert len(build_preference_pairs(trajs, max_similarity=1.0)) == 15
    a = build_preference_pairs(trajs, max_similarity=1.0, max_pairs_per_task=4, seed=1)
    b = build_preference_pairs(trajs, max_similarity=1.0, max_pairs_per_task=4, seed=1)
    assert len(a) == 4 and [p.to_dict() for p in a] == [p.to_dict() for p in b]


def test_bad_pair_arguments_raise():
    with pytest.raises(ValueError, match="max_similarity"):
        build_preference_pairs([], max_similarity=1.5)


def _maze_trajs(policy, n: int, seed: int = 0, split: str = "train") -> list[Trajectory]:
    cfg = RolloutConfig(group_size=1, seed=seed)
    seeds = list(range(seed, seed + n))
    return run_episodes_with_policy(policy, "arborl/Maze-v0", seeds, cfg, split, KW).trajectories


def test_replay_checks_observations():
    (t,) = _maze_trajs(RandomPolicy(3), 1)
    env = make("arborl/Maze-v0", **KW)
    states = replay(env, t)
    assert len(states) == t.num_steps
    assert states[0][1] == t.steps[1].observation
    other = make("arborl/Maze-v0", size=5, **KW)
    with pytest.raises(ValueError, match="env kwargs"):
        replay(other, t)


class WallPolicy:
    """Always 'up': stays put once against a wall, a deterministic loser (test plug-in)."""

    name = "wall"

    def act(self, episodes, envs):
        return [Decision(action="u", response_text="u") for _ in episodes]


def test_mc_labels_match_bfs_reachability_under_the_oracle():
    (t,) = _maze_trajs(RandomPolicy(5), 1, seed=11)
    assert not t.won and t.num_steps == 16  # a random walk that timed out
    [rec] = monte_carlo_step_labels([t], OraclePolicy(), KW, num_rollouts=2)
    env = make("arborl/Maze-v0", **KW)
    expected = []
    for step_i, (snap, _, _) in enumerate(replay(env, t)):
        env.restore(snap)
        dist = env._goal_distances()[tuple(env.pos)]
        # the oracle walks a shortest path: it wins iff the distance fits the turns left
        expected.append(1.0 if dist <= env.max_turns - (step_i + 1) else 0.0)
    expected[-1] = 0.0  # the last step ended the episode unwon: exact label, no rollouts
    assert rec.labels == expected
    assert rec.num_rollouts == [2] * 15 + [0]
    assert sum(expected) > 0  # the check is not vacuous


def test_mc_labels_are_success_rates_and_exact_at_the_end():
    (won,) = _maze_trajs(OraclePolicy(), 1, seed=3)
    [rec] = monte_carlo_step_labels([won], WallPolicy(), KW, num_rollouts=3)
    assert rec.labels[-1] == 1.0  # the winning step
    # continuing with "up" forever from a state not next to the goal (below it) never wins
    assert all(x in (0.0, 1.0) for x in rec.labels)
    [mixed] = monte_carlo_step_labels([won], MixedPolicy(0.5, seed=1), KW, num_rollouts=4)
    assert all(x in (0.0, 0.25, 0.5, 0.75, 1.0) for x in mixed.labels)
    [again] = monte_carlo_step_labels([won], MixedPolicy(0.5, seed=1), KW, num_rollouts=4)
    assert again.labels == mixed.labels  # seeded


def _sibling_table(recs, t):
    """{(step, action): label} of sibling records, checking each record's shape."""
    got = {}
    for r in recs:
        i = r.trajectory.num_steps - 1
        assert r.trajectory.steps[:i] == t.steps[:i]  # the taken prefix, then the sibling
        assert r.trajectory.steps[i].action != t.steps[i].action
        assert all(math.isnan(x) for x in r.labels[:i])  # context only
        assert r.trajectory.meta["final_observation"]  # scored after the state it led to
        got[(i, r.trajectory.steps[i].action)] = r.labels[i]
    return got


def test_sibling_labels_match_bfs_reachability_of_the_untaken_moves():
    (t,) = _maze_trajs(RandomPolicy(5), 1, seed=11)  # a random walk that timed out
    env = make("arborl/Maze-v0", **KW)
    expected, first_seen = {}, {}
    obs, info = env.reset(seed=t.seed, options={"split": "train"})
    for i, step in enumerate(t.steps):
        first_seen.setdefault(obs, i)
        for a in info["available_actions"]:
            if a != step.action:
                probe = make("arborl/Maze-v0", **KW)
                probe.restore(env.snapshot())
                _, _, _, _, pinfo = probe.step(a)
                dist = probe._goal_distances()[tuple(probe.pos)]
                # the oracle wins iff the distance fits the turns left after this move
                fits = dist <= probe.max_turns - (i + 1) and i + 1 < probe.max_turns
                expected[(i, a)] = 1.0 if pinfo.get("won") or fits else 0.0
        obs, _, _, _, info = env.step(step.action)
    every = monte_carlo_sibling_labels([t], OraclePolicy(), KW, 2, dedupe_states=False)
    assert _sibling_table(every, t) == expected and len(every) == 3 * t.num_steps
    assert 0 < sum(expected.values()) < len(expected)  # the check is not vacuous
    deduped = _sibling_table(monte_carlo_sibling_labels([t], OraclePolicy(), KW, 2), t)
    firsts = set(first_seen.values())
    assert deduped == {k: v for k, v in expected.items() if k[0] in firsts}
    assert len(firsts) < t.num_steps  # the walk revisited states


def test_sibling_labels_need_available_actions(monkeypatch):
    (t,) = _maze_trajs(RandomPolicy(5), 1, seed=11)
    monkeypatch.setattr(MazeEnv, "_available_actions", lambda self: None)
    with pytest.raises(ValueError, match="available_actions"):
        monte_carlo_sibling_labels([t], OraclePolicy(), KW)


def test_data_policy_specs():
    assert make_data_policy("mixed:0.25").p_oracle == 0.25
    assert make_data_policy("oracle").name == "oracle"
    with pytest.raises(ValueError, match="mixed:P"):
        make_data_policy("mixed:lots")


def test_jsonl_round_trip(tmp_path):
    pairs = [PreferencePair("a", traj("a", "u", 1.0), traj("a", "dd", 0.0), 1.0)]
    labels = [StepLabels(traj("a", "ud", 1.0), [0.5, 1.0], [4, 0])]
    p1, p2 = write_jsonl(tmp_path / "p.jsonl", pairs), write_jsonl(tmp_path / "s.jsonl", labels)
    assert [p.to_dict() for p in read_pairs(p1)] == [p.to_dict() for p in pairs]
    assert read_step_labels(p2)[0].labels == [0.5, 1.0]
    context = [StepLabels(traj("a", "ud", 1.0), [math.nan, 0.25], [0, 4])]
    assert '"labels": [null, 0.25]' in write_jsonl(tmp_path / "c.jsonl", context).read_text()
    back = read_step_labels(tmp_path / "c.jsonl")[0].labels
    assert math.isnan(back[0]) and back[1] == 0.25
    (tmp_path / "bad.jsonl").write_text('{"task_id": "a"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_pairs(tmp_path / "bad.jsonl")
