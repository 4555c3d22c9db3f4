"""DAgger's mix (`arborl.rollout.dagger.DaggerPolicy`): β=1 executes only the teacher's
actions, β=0 only the student's, and every state is labelled either way. A real tiny
student (tiny-0.1m, scoring) on the Ledge env, whose oracle is the teacher."""

import pytest

from arborl.agent import AgentConfig
from arborl.generation import make_backend
from arborl.rollout import RolloutConfig, build_batch, make_lm_policy, run_episodes_with_policy
from arborl.rollout.dagger import DaggerPolicy
from arborl.train.teacher import OracleTeacher, TeacherLabels
from tests.train._teacher_envs import LedgeEnv

SEEDS = list(range(12))


@pytest.fixture(scope="module")
def student_parts():
    return make_backend("tiny-0.1m", seed=0)


def _run(student_parts, beta, labels=None):
    backend, tok = student_parts
    cfg = RolloutConfig(num_tasks=len(SEEDS), group_size=2, max_new_tokens=4, seed=3)
    agent = AgentConfig(memory="last_k", memory_k=0, include_instruction=False, action_mode="score")
    student = make_lm_policy(backend, tok, cfg, agent)
    policy = student if beta is None else DaggerPolicy(student, labels, beta, seed=11)
    res = run_episodes_with_policy(policy, LedgeEnv.env_id, SEEDS, cfg)
    return policy, res


def _turns(res):
    return [t for ep in res.episodes for t in ep.turns]


def test_beta_one_executes_only_the_teachers_actions(student_parts):
    labels = TeacherLabels(OracleTeacher(), "distribution", 1000)
    policy, res = _run(student_parts, 1.0, labels)
    turns = _turns(res)
    assert policy.num_teacher_actions == policy.num_decisions == len(turns) > 20
    for t in turns:
        c = t.choice
        assert c.teacher_acted
        assert c.teacher_p[c.chosen] == 1.0  # the oracle's one-hot label is what ran
        assert t.action == c.actions[c.chosen]
    # the oracle never walks into the trap, so neither do its actions here
    assert not any(t.observation.startswith("t") for t in turns)
    assert labels.cost.states == len(turns) and labels.cost.cache_hits == 0  # never cached


def test_beta_zero_executes_only_the_students_and_still_labels_every_state(student_parts):
    _, plain = _run(student_parts, None)
    labels = TeacherLabels(OracleTeacher(), "distribution", 1000)
    policy, res = _run(student_parts, 0.0, labels)
    assert policy.num_teacher_actions == 0
    # the same episodes as the student alone: the mix draws from its own stream
    assert [t.action for t in _turns(res)] == [t.action for t in _turns(plain)]
    assert all(t.choice.teacher_p is not None and not t.choice.teacher_acted for t in _turns(res))
    batch = build_batch(res.episodes, "step", student_parts[1].pad_token_id)
    assert batch["teacher_p"].shape == (len(_turns(res)), 3)
    assert batch["teacher_p"].sum(-1).eq(1.0).all()  # one-hot rows
    # the untrained student walks into the trap, and the oracle labels it "u" there
    trapped = [t for t in _turns(res) if t.observation.startswith("t")]
    assert trapped and all(t.choice.teacher_p == [0.0, 0.0, 1.0] for t in trapped)


def test_beta_half_mixes_and_teacher_rows_carry_the_students_logp(student_parts):
    labels = TeacherLabels(OracleTeacher(), "distribution", 1000)
    policy, res = _run(student_parts, 0.5, labels)
    share = policy.num_teacher_actions / policy.num_decisions
    assert policy.num_decisions > 60 and 0.3 < share < 0.7
    student = policy.student
    for t in _turns(res):
        if t.choice.teacher_acted:  # old_logp is the student's log-prob of what ran
            (x,) = student.scored_states([(tuple(t.prompt_ids), tuple(t.choice.actions))])
            assert t.choice.logp == x.choice_logp[t.choice.chosen]
            assert t.response_ids == x.token_ids[t.choice.chosen]


def test_beta_outside_zero_one_is_refused(student_parts):
    with pytest.raises(ValueError, match=r"beta=1.5 must be in \[0, 1\]"):
        DaggerPolicy(None, None, 1.5, 0)
