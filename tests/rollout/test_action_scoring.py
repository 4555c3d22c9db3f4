"""`ScoringPolicy` (`agent.action_mode=score`): actions come from the env's list, sampling
is seeded per episode-turn, and the step batch holds what recomputes each categorical."""

import dataclasses

import pytest
import torch

from arborl.agent import AgentConfig, parse_action
from arborl.agent.parsing import action_response
from arborl.generation.hf import HFBackend
from arborl.rollout import (
    CHOICE_KEYS,
    LMPolicy,
    RolloutConfig,
    ScoringPolicy,
    make_lm_policy,
    run_episodes_with_policy,
    run_rollout,
)

SCORE = AgentConfig(action_mode="score", memory="last_k", memory_k=0, include_instruction=False)
MAZE = "arborl/Maze-v0"
SHORT = {"short_actions": True}  # moves u/d/l/r, as `arborl train` configures Maze


def _rollout(policy, agent=SCORE, **cfg):
    model, tok = policy
    rcfg = RolloutConfig(**{"num_tasks": 3, "group_size": 2, "max_turns": 4, "seed": 5, **cfg})
    backend = HFBackend(model, tok, seed=0)
    return run_rollout(backend, tok, MAZE, None, rcfg, agent, env_kwargs=SHORT)


def test_the_action_mode_picks_the_policy(policy):
    model, tok = policy
    backend, cfg = HFBackend(model, tok), RolloutConfig()
    assert type(make_lm_policy(backend, tok, cfg, AgentConfig())) is LMPolicy
    assert type(make_lm_policy(backend, tok, cfg, SCORE)) is ScoringPolicy
    with pytest.raises(ValueError, match=r"agent.action_mode='pick' is not one of"):
        AgentConfig(action_mode="pick")
    with pytest.raises(ValueError, match=r"agent.score_norm='char' is not one of"):
        AgentConfig(score_norm="char")


def test_every_action_is_one_of_the_envs_and_the_batch_recomputes_the_choice(policy):
    res = _rollout(policy)
    assert res.stats["invalid_action_rate"] == 0.0
    b = res.batch
    rows = len(b)
    assert rows == sum(len(t.steps) for t in res.trajectories)
    assert set(CHOICE_KEYS) <= set(b.tensors)
    assert b.info["scored_choices"] is True  # declared, not guessed from the columns
    assert b.tensors["response_mask"].shape == (rows, 1) == b.tensors["old_logp"].shape
    ids, mask = b.tensors["cand_ids"], b.tensors["cand_mask"]
    assert ids.shape[:2] == (rows, 4) and mask.shape == ids.shape  # Maze: 4 moves
    tok = policy[1]
    for r, ep_turn in enumerate(t for ep in res.episodes for t in ep.turns):
        c = ep_turn.choice
        assert ep_turn.action == c.actions[c.chosen] == b.meta["action"][r]
        assert c.actions == ["u", "d", "l", "r"]  # Maze lists every move, every turn
        for j, cand in enumerate(c.token_ids):  # each candidate: its text and the eos
            assert cand[-1] == tok.eos_token_id
            assert tok.decode(cand[:-1]) == action_response(c.actions[j], SCORE)
            assert ids[r, j, : len(cand)].tolist() == cand and mask[r, j].sum() == len(cand)
        assert int(b.tensors["chosen"][r]) == c.chosen
        assert float(b.tensors["old_logp"][r, 0]) == pytest.approx(c.logp)
        assert b.tensors["input_ids"][r, -1] == c.token_ids[c.chosen][0]
        assert len(ep_turn.logprobs) == len(ep_turn.response_ids)  # per-token, as generated


def test_sampling_is_seeded_per_episode_turn(policy):
    a = _rollout(policy)
    b = _rollout(policy)
    c = _rollout(policy, seed=6)
    d = _rollout(policy, async_envs=True)  # other batch compositions, same streams

    def actions(res):
        return [t.action for ep in res.episodes for t in ep.turns]

    assert actions(a) == actions(b) == actions(d)
    assert actions(a) != actions(c)


def test_temperature_zero_takes_the_most_likely_candidate(policy):
    res = _rollout(policy, temperature=0.0)
    for ep in res.episodes:
        for t in ep.turns:
            best = max(range(len(t.choice.actions)), key=lambda j: _score(policy, t, j))
            assert t.choice.chosen == best


def _score(policy, turn, j):
    """The candidate's normalised log-probability, from one full forward."""
    model, _ = policy
    cand = turn.choice.token_ids[j]
    seq = torch.tensor([turn.prompt_ids + cand])
    with torch.no_grad():
        logits = model(input_ids=seq).logits[0, len(turn.prompt_ids) - 1 : -1].float()
    lp = logits.log_softmax(-1).gather(-1, torch.tensor(cand)[:, None]).sum()
    return float(lp) / turn.choice.norms[j]


def test_norms_follow_the_setting(policy):
    for norm, want in [("sum", [1.0] * 4), ("token", [2.0] * 4), ("word", [1.0] * 4)]:
        agent = dataclasses.replace(SCORE, score_norm=norm)
        res = _rollout(policy, agent=agent, num_tasks=1, group_size=1, max_turns=1)
        assert res.episodes[0].turns[0].choice.norms == want  # "u" + eos: 2 tokens, 1 word


def test_what_score_mode_cannot_run_is_refused_with_the_fix(policy, monkeypatch):
    model, tok = policy

    class NoModel:  # an HTTP / vLLM backend: generates, holds no local model
        def generate(self, prompts, params): ...

    with pytest.raises(ValueError, match="holds no local model"):
        ScoringPolicy(NoModel(), tok, RolloutConfig(), SCORE)
    with pytest.raises(ValueError, match="rollout.view='episode' must be 'step'"):
        ScoringPolicy(HFBackend(model, tok), tok, RolloutConfig(view="episode"),
                      dataclasses.replace(SCORE, memory="full"))  # fmt: skip
    from arborl.envs.builtin.maze import MazeEnv

    monkeypatch.setattr(MazeEnv, "_available_actions", lambda self: None)
    with pytest.raises(ValueError, match="info\\['available_actions'\\].*action_mode=generate"):
        _rollout(policy)


@pytest.mark.parametrize("fmt", ["plain", "react", "react_text"])
def test_a_candidate_response_parses_back_to_its_action(fmt):
    cfg = AgentConfig(action_format=fmt)
    for action in ["up", "go north", "take key 3"]:
        parsed = parse_action(action_response(action, cfg), cfg)
        assert (parsed.action, parsed.format_ok) == (action, True)


def test_a_state_met_again_is_scored_once_until_the_weights_change(policy, monkeypatch):
    model, tok = policy
    calls: list[int] = []  # states scored by each forward
    real = ScoringPolicy._score
    monkeypatch.setattr(
        ScoringPolicy,
        "_score",
        lambda self, states: calls.append(len(states)) or real(self, states),
    )
    res = _rollout(policy, num_tasks=2, group_size=4, max_turns=6)
    turns = [t for ep in res.episodes for t in ep.turns]
    states = {(tuple(t.prompt_ids), tuple(t.choice.actions)) for t in turns}
    assert sum(calls) == len(states) < len(turns)  # group members, walls bumped into

    cfg = RolloutConfig(group_size=2, max_turns=1, seed=5)
    scorer = ScoringPolicy(HFBackend(model, tok), tok, cfg, SCORE)
    run_episodes_with_policy(scorer, MAZE, [1, 2], cfg, env_kwargs=SHORT)
    calls.clear()
    run_episodes_with_policy(scorer, MAZE, [1, 2], cfg, env_kwargs=SHORT)
    assert calls == []  # the same two first states, same weights: no forward
    with torch.no_grad():
        next(model.parameters()).add_(0.0)  # an in-place write, as an optimizer step
    run_episodes_with_policy(scorer, MAZE, [1, 2], cfg, env_kwargs=SHORT)
    assert calls == [2]


def test_states_are_scored_shortest_prompt_first_in_bounded_chunks(policy, monkeypatch):
    """Padded prompt tokens per scoring forward stay under MAX_SCORED_PROMPT_TOKENS, the
    chunks go shortest prompt first, and the scores are those of one forward, in the order
    the states were given."""
    import arborl.rollout.action_scoring as scoring

    model, tok = policy
    res = _rollout(policy, num_tasks=3, group_size=2, max_turns=4)
    states = list(dict.fromkeys((tuple(t.prompt_ids), tuple(t.choice.actions))
                                for ep in res.episodes for t in ep.turns))  # fmt: skip
    scorer = ScoringPolicy(HFBackend(model, tok), tok, RolloutConfig(), SCORE)
    whole = scorer._score(states)
    chunks: list[list[int]] = []
    real = ScoringPolicy._score_chunk
    monkeypatch.setattr(
        ScoringPolicy,
        "_score_chunk",
        lambda self, part: chunks.append([len(p) for p, _ in part]) or real(self, part),
    )
    longest = max(len(p) for p, _ in states)
    monkeypatch.setattr(scoring, "MAX_SCORED_PROMPT_TOKENS", 2 * longest)
    chunked = scorer._score(states)
    assert len(chunks) > 1 and all(len(c) * max(c) <= 2 * longest for c in chunks)
    assert [n for c in chunks for n in c] == sorted(len(p) for p, _ in states)
    for a, b in zip(whole, chunked):
        assert a.actions == b.actions
        torch.testing.assert_close(
            torch.tensor(a.choice_logp), torch.tensor(b.choice_logp), atol=1e-5, rtol=0
        )
