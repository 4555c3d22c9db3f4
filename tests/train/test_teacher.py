"""Teachers (`arborl.train.teacher`): the three kinds label states as documented, the
cache makes a repeated state free (never for the oracle, which reads hidden env state),
and the `teacher` section fails at load with the key, the value and the fix."""

import math

import pytest

from arborl.config import ConfigError
from arborl.rollout import build_batch, make_lm_policy, run_episodes_with_policy
from arborl.rollout.dagger import DaggerPolicy
from arborl.train.config import load_train_config
from arborl.train.teacher import TeacherLabels, action_distribution, build_teacher_labels
from tests.train._teacher_envs import LedgeEnv

CALLS: list[str] = []


def rule_teacher(observation, actions, info):
    """A callable teacher: climb in the trap, else {r: 3, w: 1} (normalised to 0.75/0.25)."""
    CALLS.append(observation)
    return "u" if observation.startswith("t") else {"r": 3.0, "w": 1.0}


def _cfg(*overrides):
    return load_train_config(
        [
            "model.name_or_path=tiny-0.1m",
            f"env.id={LedgeEnv.env_id}",
            "env.kwargs={}",
            "agent.action_mode=score",
            "algo=distill",
            *overrides,
        ]
    )


def _rollout(cfg, labels, beta=0.0):
    from arborl.generation import make_backend
    from arborl.rollout import RolloutConfig

    backend, tok = make_backend("tiny-0.1m", seed=0)
    r = RolloutConfig(num_tasks=4, group_size=2, max_new_tokens=4, seed=5)
    student = make_lm_policy(backend, tok, r, cfg.agent)
    res = run_episodes_with_policy(DaggerPolicy(student, labels, beta, 1), LedgeEnv.env_id, None, r)
    return res, build_batch(res.episodes, "step", tok.pad_token_id)


def test_callable_teacher_is_normalised_cached_and_hard_on_request():
    CALLS.clear()
    cfg = _cfg("teacher.kind=callable", f"teacher.source={__name__}:rule_teacher")
    labels = build_teacher_labels(cfg)
    res, batch = _rollout(cfg, labels)
    turns = [t for ep in res.episodes for t in ep.turns]
    for t in turns:
        want = [0.0, 0.0, 1.0] if t.observation.startswith("t") else [0.75, 0.25, 0.0]
        assert t.choice.teacher_p == want
    # 8 episodes start in the same state "s0": the teacher saw each distinct state once
    assert len(CALLS) == len(set(CALLS)) == labels.cost.states < len(turns)
    assert labels.cost.cache_hits == len(turns) - labels.cost.states
    hard = build_teacher_labels(
        _cfg(
            "teacher.kind=callable",
            "teacher.label=action",
            f"teacher.source={__name__}:rule_teacher",
        )
    )
    res, _ = _rollout(cfg, hard)
    assert {tuple(t.choice.teacher_p) for ep in res.episodes for t in ep.turns} <= {
        (1.0, 0.0, 0.0),
        (0.0, 0.0, 1.0),
    }


def test_model_teacher_scores_the_candidates_with_its_own_forward():
    # the teacher is the student's own preset (same weights): its label of each state is
    # the student's categorical, so the executed choice's teacher probability is exp(old_logp)
    cfg = _cfg("teacher.kind=model", "teacher.source=tiny-0.1m")
    labels = build_teacher_labels(cfg)
    res, batch = _rollout(cfg, labels)
    p = batch["teacher_p"]
    assert p.shape[1] == 3 and all(abs(float(s) - 1.0) < 1e-5 for s in p.sum(-1))
    chosen_p = p.gather(1, batch["chosen"][:, None])[:, 0]
    for got, logp in zip(chosen_p.tolist(), batch["old_logp"][:, 0].tolist()):
        assert abs(got - math.exp(logp)) < 1e-4
    assert labels.cost.cache_hits > 0  # the group's episodes share their first state


def test_oracle_teacher_is_one_hot_and_never_cached():
    cfg = _cfg("teacher.kind=oracle")
    labels = build_teacher_labels(cfg)
    res, _ = _rollout(cfg, labels)
    turns = [t for ep in res.episodes for t in ep.turns]
    assert all(sorted(t.choice.teacher_p) == [0.0, 0.0, 1.0] for t in turns)
    assert labels.cost.cache_hits == 0 and labels.cost.states == len(turns)


def test_action_distribution_reads_each_answer_form_and_refuses_a_stranger():
    acts = ["r", "w", "u"]
    assert action_distribution("w", acts, "t") == [0.0, 1.0, 0.0]
    assert action_distribution({"r": 1, "u": 3}, acts, "t") == [0.25, 0.0, 0.75]
    assert action_distribution([2, 2, 0], acts, "t") == [0.5, 0.5, 0.0]
    with pytest.raises(ValueError, match=r"answered \['jump'\], not among the available"):
        action_distribution("jump", acts, "t")
    with pytest.raises(ValueError, match="gave 2 weights for 3 actions"):
        action_distribution([1, 0], acts, "t")


def test_teacher_labels_cache_is_bounded():
    class Counting:
        def label(self, episodes, envs, actions):
            return [[1.0] for _ in episodes]

        def state_key(self, ep, actions):
            return ep

    labels = TeacherLabels(Counting(), "distribution", cache_size=3)
    labels(list("abc"), [None] * 3, [["x"]] * 3)
    labels(list("de"), [None] * 2, [["x"]] * 2)  # over 3: cleared, then d and e kept
    assert len(labels.cache) == 2 and labels.cost.calls == 2 and labels.cost.states == 5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo=distill"], "algo=distill trains the teacher's term alone, but no teacher"),
        (["teacher.kind=orcle"], "teacher.kind='orcle' is not known.*Did you mean 'oracle'"),
        (["teacher.kind=model"], "teacher.kind=model needs teacher.source"),
        (["teacher.kind=oracle", "agent.action_mode=generate"],
         "agent.action_mode=generate does not choose among them: set agent.action_mode to one of \\[.score.\\]"),
        (["teacher.kind=oracle", "algo=grpo", "algo.filter_groups=true"],
         "cannot run with algo.filter_groups=true: .*set algo.filter_groups=false"),
        (["teacher.kind=oracle", "teacher.beta=1.5"], r"teacher.beta=1.5 is above the maximum 1"),
        (["teacher.kind=oracle", "teacher.buffer_size=-1"], "teacher.buffer_size=-1 is below"),
    ],
)  # fmt: skip
def test_bad_teacher_settings_fail_at_load_naming_key_and_fix(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(
            *[o for o in overrides if not o.startswith("algo=")],
            *[o for o in overrides if o.startswith("algo=")],
        )
