"""`encode_trajectory` renders only the step prefixes that fall inside the kept window
(review defect 10: it rendered every prefix, quadratic in the episode length)."""

from arborl.data import Step, Trajectory
from arborl.models import load_policy
from arborl.rewards import reward_model
from arborl.rewards.reward_model import encode_trajectory


def _traj(num_steps: int) -> Trajectory:
    steps = [Step(observation=f"A.G{i % 7}", action="r", reward=0.0) for i in range(num_steps)]
    return Trajectory(task_id="t", env_id="arborl/Maze-v0", seed=0, instruction="go", steps=steps)


def test_long_episode_renders_only_the_window(monkeypatch):
    _, tok = load_policy("tiny-0.1m", seed=0)
    calls = []
    real = reward_model._render
    monkeypatch.setattr(reward_model, "_render", lambda t, m: calls.append(len(m)) or real(t, m))
    enc = encode_trajectory(tok, _traj(300), max_length=64)
    kept = [e for e in enc.step_ends if e >= 0]
    assert 0 < len(kept) < 20 and len(enc.ids) == 64
    # One full render, one per kept step, and one for the first step before the window.
    assert len(calls) == 1 + len(kept) + 1, len(calls)  # it was 1 + 300


def test_window_positions_match_rendering_every_prefix():
    _, tok = load_policy("tiny-0.1m", seed=0)
    traj = _traj(40)
    enc = encode_trajectory(tok, traj, max_length=80)
    messages = reward_model.trajectory_messages(traj, True, 0)
    full = reward_model._render(tok, messages)
    cut = len(full) - 80
    for t, end in enumerate(enc.step_ends):  # recompute each step's end the slow way
        last = 1 + 2 * t + 1 + (1 if 1 + 2 * t + 2 < len(messages) else 0)
        want = len(reward_model._render(tok, messages[: last + 1])) - 1 - cut
        assert end == (want if want >= 0 else -1), t
