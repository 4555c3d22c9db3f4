"""`arborl/FrozenLake-v0`: cross a frozen lake from S to G without falling into a hole.

Lakes are drawn with a seed and kept only if a hole-free path from S to G exists. With
`slippery=True` a move goes the intended way with probability 1/3 and to each
perpendicular side with 1/3 (as in Gymnasium); the slip RNG is seeded from the reset seed
and lives in the snapshot, so restored branches replay identically. The oracle is a BFS
path when not slippery and a value-iteration policy (maximum success probability) when
slippery; a slippery lake can still swallow the oracle, so it does not win every episode.
"""

from __future__ import annotations

import random
from typing import Any

from arborl.envs.base import TextEnv
from arborl.envs.builtin.maze import DIRECTIONS, _check_grid_task, bfs_distances, parse_direction
from arborl.envs.splits import sample_in_split, task_id_of

Cell = tuple[int, int]
_PERPENDICULAR = {"up": ("left", "right"), "down": ("left", "right"),
                  "left": ("up", "down"), "right": ("up", "down")}  # fmt: skip


class FrozenLakeEnv(TextEnv):
    """Reach G from S over F cells; H ends the episode with reward 0."""

    env_id = "arborl/FrozenLake-v0"
    description = "Cross a frozen lake from S to G avoiding holes (H); optionally slippery."
    action_format = "up|down|left|right (or u/d/l/r)"
    default_max_turns = 20
    _state_attrs = ("pos", "_slip_rng")

    def __init__(
        self,
        size: int = 5,
        hole_prob: float = 0.2,
        min_path: int = 3,
        slippery: bool = False,
        split: str = "train",
        max_turns: int | None = None,
    ) -> None:
        super().__init__(split=split, max_turns=max_turns)
        if size < 2:
            raise ValueError(f"size={size!r} must be >= 2")
        if not 0.0 <= hole_prob < 1.0:
            raise ValueError(f"hole_prob={hole_prob!r} must be in [0, 1)")
        if min_path < 1:
            raise ValueError(f"min_path={min_path!r} must be >= 1")
        self.size, self.hole_prob, self.min_path = size, hole_prob, min_path
        self.slippery = bool(slippery)
        self.pos: Cell = (0, 0)
        self._slip_rng = random.Random(0)
        self._policy_cache: dict[str, dict[Cell, str]] = {}

    def reset(self, seed: int | None = None, options: dict | None = None):
        # A separate stream from the task sampler, so slips do not depend on the draw count.
        seed = self._resolve_seed(seed)
        self._slip_rng = random.Random(None if seed is None else f"slip:{seed}")
        return super().reset(seed=seed, options=options)

    # --- task generation ----------------------------------------------------------------
    def _draw(self, rng) -> dict | None:
        n = self.size
        rows = [["H" if rng.random() < self.hole_prob else "F" for _ in range(n)] for _ in range(n)]
        safe = [(r, c) for r in range(n) for c in range(n) if rows[r][c] == "F"]
        if len(safe) < 2:
            return None
        start, goal = rng.sample(safe, 2)
        dist = bfs_distances(set(safe), start).get(goal)
        if dist is None or dist < self.min_path:
            return None
        rows[start[0]][start[1]], rows[goal[0]][goal[1]] = "S", "G"
        return {"grid": ["".join(row) for row in rows]}

    def _sample_task(self, rng, split: str) -> dict:
        return sample_in_split(rng, split, self._draw)

    def _task_id(self, task: dict) -> str:
        return task_id_of(task)

    def _find(self, ch: str) -> Cell:
        cells = [
            (r, c) for r, row in enumerate(self.task["grid"]) for c, x in enumerate(row) if x == ch
        ]
        if len(cells) != 1:
            raise ValueError(f"task grid {self.task['grid']!r} must hold exactly one {ch!r}")
        return cells[0]

    # --- episode ------------------------------------------------------------------------
    def _start(self, task: dict) -> str:
        _check_grid_task(task, ("grid",), "SFHG")
        self._find("G")
        self.pos = self._find("S")
        return self._render()

    def _cell(self, cell: Cell) -> str:
        return self.task["grid"][cell[0]][cell[1]]

    def _render(self) -> str:
        rows = [list(row) for row in self.task["grid"]]
        rows[self.pos[0]][self.pos[1]] = "A"
        return "\n".join("".join(row) for row in rows)

    def _instruction(self, task: dict) -> str:
        slip = " The ice is slippery: you may slide sideways." if self.slippery else ""
        return (
            "FrozenLake: S start, F ice, H hole, G goal, A you. Reach G without falling "
            f"into a hole.{slip} Reply with one move: up, down, left or right."
        )

    def _moved(self, cell: Cell, move: str) -> Cell:
        dr, dc = DIRECTIONS[move]
        r, c = cell[0] + dr, cell[1] + dc
        n = len(self.task["grid"])
        return (r, c) if 0 <= r < n and 0 <= c < len(self.task["grid"][0]) else cell

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        move = parse_direction(action)
        if move is None:
            return "invalid move; use up/down/left/right\n" + self._render(), 0.0, False, False
        if self.slippery:
            move = self._slip_rng.choice((move, *_PERPENDICULAR[move]))
        self.pos = self._moved(self.pos, move)
        cell = self._cell(self.pos)
        return self._render(), float(cell == "G"), cell in "GH", True

    def _won(self) -> bool:
        return self._cell(self.pos) == "G"

    def _anchor(self) -> Any:
        return (self._task_id(self.task), self.pos)

    def _available_actions(self) -> list[str]:
        return list(DIRECTIONS)

    # --- oracle -------------------------------------------------------------------------
    def _policy(self) -> dict[Cell, str]:
        grid = self.task["grid"]
        cells = [(r, c) for r in range(len(grid)) for c in range(len(grid[0]))]
        if not self.slippery:
            safe = {x for x in cells if self._cell(x) != "H"}
            dist = bfs_distances(safe, self._find("G"))
            return {
                x: next((m for m in DIRECTIONS if dist.get(self._moved(x, m)) == dist[x] - 1), "up")
                for x in cells
                if x in dist and dist[x] > 0
            }
        # Value iteration on P(reach G): V(G)=1, V(H)=0, V(x)=max_a mean over 3 outcomes.
        value = {x: float(self._cell(x) == "G") for x in cells}
        live = [x for x in cells if self._cell(x) not in "GH"]
        outcomes = {
            (x, m): [self._moved(x, o) for o in (m, *_PERPENDICULAR[m])]
            for x in live
            for m in DIRECTIONS
        }
        policy: dict[Cell, str] = {}
        for _ in range(1000):
            delta = 0.0
            for x in live:
                q = {m: sum(value[y] for y in outcomes[(x, m)]) / 3 for m in DIRECTIONS}
                best = max(q, key=q.get)
                delta = max(delta, abs(q[best] - value[x]))
                value[x], policy[x] = q[best], best
            if delta < 1e-6:
                break
        return policy

    def oracle_action(self) -> str:
        """BFS move (not slippery) or the move maximising success probability (slippery)."""
        tid = self._task_id(self.task)
        if tid not in self._policy_cache:
            self._policy_cache[tid] = self._policy()
        return self._policy_cache[tid].get(self.pos, "up")
