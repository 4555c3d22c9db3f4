"""A tiny env written against openenv-core's own server classes, served on 127.0.0.1.

Run with the openenv venv's python (never arborl's): `python counter_server.py PORT`.
The env counts the actions it was sent; the episode ends with reward 1.0 on the third
step, or with reward 0.0 at once on the action "quit". Each observation echoes the
action, so a client can check which session it talks to.
"""

import sys
from typing import Any

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_app


class CountAction(Action):
    message: str


class CountObservation(Observation):
    echoed: str = ""
    count: int = 0
    seed: int | None = None


class CountEnv(Environment[CountAction, CountObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=None, step_count=0)
        self._seed: int | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any):
        self._state = State(episode_id=episode_id or "ep", step_count=0)
        self._seed = seed
        return CountObservation(echoed=f"start {seed}", count=0, seed=seed)

    def step(self, action: CountAction, timeout_s: float | None = None, **kw: Any):
        self._state.step_count += 1
        n = self._state.step_count
        if action.message == "quit":
            return CountObservation(echoed="quit", count=n, seed=self._seed, done=True, reward=0.0)
        done = n >= 3
        return CountObservation(
            echoed=f"{action.message} #{n}",
            count=n,
            seed=self._seed,
            done=done,
            reward=1.0 if done else 0.0,
        )

    @property
    def state(self) -> State:
        return self._state


app = create_app(CountEnv, CountAction, CountObservation, env_name="count", max_concurrent_envs=8)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
