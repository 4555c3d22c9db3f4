"""`Pool`, the interface of a batch of envs stepped together, and `EnvPool`, its in-process
implementation, with GRPO-style task groups.

`reset(seeds, group_size)` gives each group of `group_size` consecutive envs the same
seed, hence the same task, and tags every info with its `group_id`; group-relative
advantages (GRPO, RLOO, GiGPO) need exactly that. `step` advances only the envs it is
given actions for, and the pool never auto-resets: a finished env stays finished (and
inactive) until the next `reset`, so the rollout loop owns episode boundaries.

`Pool` is what the rollout loop and searches may rely on, whatever the transport:
`EnvPool` here and `RemotePool` (`arborl.envs.remote.base`, for the subprocess, Ray and
HTTP modes) both satisfy it, so `make_pool` can hand back either. What they must do alike
is written once, here: `PoolBookkeeping` (done flags, groups, `len` and `pool[i]`),
`check_reset_args` and `actions_to_step` (the rules `reset` and `step` check).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from arborl.envs.registry import make


class StepResult(NamedTuple):
    """One env's `step` output (unpacks like Gymnasium's 5-tuple)."""

    obs: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


@runtime_checkable
class Pool(Protocol):
    """A batch of envs stepped together (every `make_pool` mode returns one)."""

    def __len__(self) -> int:
        """The number of envs."""

    def __getitem__(self, i: int) -> Any:
        """Env `i`, following the `Env` protocol (a proxy for an env in another process)."""

    @property
    def active(self) -> list[int]:
        """Indices of envs whose episode is still running."""

    @property
    def done(self) -> list[bool]:
        """Per-env flag: the episode ended (or the env was never reset)."""

    def reset(
        self,
        seeds: Sequence[int],
        group_size: int = 1,
        options: dict | Sequence[dict | None] | None = None,
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Reset every env; group g (envs g*group_size .. +group_size-1) uses `seeds[g]`.
        Returns (obs, infos) per env; each info also carries `group_id` and `env_index`."""

    def step(
        self, actions: dict[int, str] | Sequence[str | None]
    ) -> tuple[list[StepResult | None], list[bool]]:
        """Step the envs given an action (a dict by index, or a list with None to skip);
        one `StepResult` per env (None where not stepped) and the `done` flags."""

    def close(self) -> None:
        """Release the envs (and any workers or servers the pool started)."""


def actions_to_step(
    actions: dict[int, str] | Sequence[str | None], done: Sequence[bool]
) -> dict[int, str]:
    """`{env index: action}` from a dict or a list with None to skip, checked against the
    pool's size and `done` flags (every pool mode shares these rules)."""
    num_envs = len(done)
    if isinstance(actions, dict):
        todo = dict(actions)
    else:
        if len(actions) != num_envs:
            raise ValueError(f"got {len(actions)} actions for {num_envs} envs; use None to skip")
        todo = {i: a for i, a in enumerate(actions) if a is not None}
    for i in todo:
        if not 0 <= i < num_envs:
            raise IndexError(f"env index {i} out of range 0..{num_envs - 1}")
        if done[i]:
            raise ValueError(f"env {i} is done (or not reset); pass None for it or reset the pool")
    return todo


def check_reset_args(
    num_envs: int,
    seeds: Sequence[int],
    group_size: int,
    options: dict | Sequence[dict | None] | None,
) -> list[dict | None]:
    """`reset`'s arguments checked (every pool mode shares these rules): `group_size` divides
    `num_envs`, one seed per group, `options` one dict or one per group. Returns the options
    of each group."""
    if group_size < 1 or num_envs % group_size:
        raise ValueError(f"group_size={group_size!r} must be >= 1 and divide num_envs={num_envs}")
    num_groups = num_envs // group_size
    if len(seeds) != num_groups:
        raise ValueError(
            f"got {len(seeds)} seeds for {num_groups} groups (num_envs={num_envs}, "
            f"group_size={group_size}); pass one seed per group"
        )
    if options is None or isinstance(options, dict):
        return [options] * num_groups
    if len(options) == num_groups:
        return list(options)
    raise ValueError(f"options must be a dict or one per group ({num_groups}), got {len(options)}")


class PoolBookkeeping:
    """The `Pool` state every implementation keeps alike: env `i` (`pool[i]`, `len(pool)`),
    the `done` flags (all True before the first reset: nothing is active) and each env's
    `group_ids` entry. A pool calls `_start_reset` first thing in `reset`, and sets `_done[i]`
    as its envs reset and finish."""

    def __init__(self, envs: Sequence[Any]) -> None:
        self.num_envs = len(envs)
        self._envs = list(envs)
        self.group_ids: list[int] = list(range(self.num_envs))
        self._done = [True] * self.num_envs

    def __len__(self) -> int:
        return self.num_envs

    def __getitem__(self, i: int) -> Any:
        return self._envs[i]

    @property
    def active(self) -> list[int]:
        """Indices of envs whose episode is still running."""
        return [i for i, done in enumerate(self._done) if not done]

    @property
    def done(self) -> list[bool]:
        """Per-env flag: the episode ended (or the env was never reset)."""
        return list(self._done)

    def _start_reset(
        self,
        seeds: Sequence[int],
        group_size: int,
        options: dict | Sequence[dict | None] | None,
    ) -> list[dict | None]:
        """Check `reset`'s arguments and regroup the envs; the options of each group."""
        group_options = check_reset_args(self.num_envs, seeds, group_size, options)
        self.group_ids = [i // group_size for i in range(self.num_envs)]
        return group_options


class EnvPool(PoolBookkeeping):
    """`num_envs` envs built from a registry id (with `kwargs`) or from a zero-arg factory."""

    def __init__(self, env: str | Callable[[], Any], num_envs: int, **kwargs: Any) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} must be >= 1")
        if isinstance(env, str):
            self.envs = [make(env, **kwargs) for _ in range(num_envs)]
        elif callable(env):
            if kwargs:
                raise TypeError(
                    f"EnvPool got kwargs {sorted(kwargs)} with a factory; bind them in it"
                )
            self.envs = [env() for _ in range(num_envs)]
        else:
            raise TypeError(f"EnvPool needs an env id or a factory, got {type(env).__name__}")
        super().__init__(self.envs)

    def reset(
        self,
        seeds: Sequence[int],
        group_size: int = 1,
        options: dict | Sequence[dict | None] | None = None,
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Reset all envs: group g (envs g*group_size .. +group_size-1) uses `seeds[g]`.

        `options` is one dict for every env or one per group. Returns (obs, infos) per env;
        each info also carries `group_id` and `env_index`.
        """
        group_options = self._start_reset(seeds, group_size, options)
        all_obs, all_infos = [], []
        for i, (env, g) in enumerate(zip(self.envs, self.group_ids)):
            obs, info = env.reset(seed=seeds[g], options=group_options[g])
            all_obs.append(obs)
            all_infos.append({**info, "group_id": g, "env_index": i})
        self._done = [False] * self.num_envs
        return all_obs, all_infos

    def step(
        self, actions: dict[int, str] | Sequence[str | None]
    ) -> tuple[list[StepResult | None], list[bool]]:
        """Step the envs given an action (a dict by index, or a list with None to skip).

        Returns one `StepResult` per env (None for envs not stepped) and the `done` flags.
        An action for a finished env is an error: the pool never auto-resets.
        """
        todo = actions_to_step(actions, self._done)
        results: list[StepResult | None] = [None] * self.num_envs
        for i, action in todo.items():
            obs, reward, terminated, truncated, info = self.envs[i].step(action)
            info = {**info, "group_id": self.group_ids[i], "env_index": i}
            results[i] = StepResult(obs, float(reward), bool(terminated), bool(truncated), info)
            self._done[i] = bool(terminated or truncated)
        return results, list(self._done)

    def close(self) -> None:
        for env in self.envs:
            env.close()
