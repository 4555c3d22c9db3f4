"""`arborl/Maze-v0`: walk an agent to a goal on a small grid of walls.

The env of the main demo: a ~1M-parameter character-level model must learn it, so the
observation is only the grid (6 rows of 6 characters, 41 characters with newlines) and
the symbols and actions are explained once, in the instruction. Mazes are drawn with a
seed, kept only if a BFS shortest path from A to G has length in [min_path, max_path].

The search heuristic (`heuristic`) is 1 / (1 + d), d the BFS distance from A to G on the
grid shown. Also holds the direction parsing, BFS and grid reading shared by the grid envs
(Sokoban, FrozenLake).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from arborl.envs.base import HeuristicView, TextEnv
from arborl.envs.splits import sample_in_split, task_id_of

DIRECTIONS: dict[str, tuple[int, int]] = {
    "up": (-1, 0),
    "down": (1, 0),
    "left": (0, -1),
    "right": (0, 1),
}
"""Move name -> (row delta, column delta)."""
_ALIASES = {"u": "up", "d": "down", "l": "left", "r": "right", **{k: k for k in DIRECTIONS}}


def parse_direction(action: str) -> str | None:
    """`up/down/left/right` or `u/d/l/r`, any case, surrounding whitespace ignored."""
    return _ALIASES.get(action.strip().lower())


def bfs_distances(free: set[tuple[int, int]], source: tuple[int, int]) -> dict:
    """Shortest 4-neighbour path length from `source` to every reachable cell of `free`."""
    dist = {source: 0}
    queue = deque([source])
    while queue:
        r, c = queue.popleft()
        for dr, dc in DIRECTIONS.values():
            nxt = (r + dr, c + dc)
            if nxt in free and nxt not in dist:
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    return dist


def grid_cells(observation: str, symbols: str) -> dict[tuple[int, int], str]:
    """(row, col) -> symbol of the grid in an observation: the lines made only of `symbols`
    (feedback lines such as "invalid move; ..." are skipped)."""
    rows = [ln for ln in observation.splitlines() if ln and set(ln) <= set(symbols)]
    return {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}


def heuristic(view: HeuristicView) -> float:
    """Search heuristic: 1 / (1 + BFS distance A -> G) on the grid shown; 0 when G cannot be
    reached; 1 once won (A stands on G, so G is not shown)."""
    cells = grid_cells(view.observation, "#.AG")
    free = {p for p, ch in cells.items() if ch in ".AG"}
    a = next((p for p, ch in cells.items() if ch == "A"), None)
    g = next((p for p, ch in cells.items() if ch == "G"), None)
    if a is None or g is None:
        return 1.0 if view.won else 0.0
    d = bfs_distances(free, a).get(g)
    return 0.0 if d is None else 1.0 / (1.0 + d)


def _check_grid_task(task: dict, keys: tuple[str, ...], alphabet: str) -> list[str]:
    """Validate a task's `grid` (equal-length rows over `alphabet`) and required keys."""
    missing = [k for k in keys if k not in task]
    if missing:
        raise ValueError(f"task lacks key(s) {missing}; got keys {sorted(task)}")
    grid = task["grid"]
    if (
        not grid
        or len({len(row) for row in grid}) != 1
        or any(set(r) - set(alphabet) for r in grid)
    ):
        raise ValueError(f"task['grid']={grid!r} must be equal-length rows over {alphabet!r}")
    return grid


class MazeEnv(TextEnv):
    """Reach G from A; walls block; reward 1 on reaching G."""

    env_id = "arborl/Maze-v0"
    description = "Walk A to G on a small grid maze (# wall, . free)."
    action_format = "up|down|left|right (or u/d/l/r)"
    default_max_turns = 16
    _state_attrs = ("pos",)

    def __init__(
        self,
        size: int = 6,
        wall_prob: float = 0.3,
        min_path: int = 3,
        max_path: int = 12,
        short_actions: bool = False,
        split: str = "train",
        max_turns: int | None = None,
    ) -> None:
        """`short_actions=True` makes the oracle, `available_actions` and the instruction
        use one-letter moves (u/d/l/r): one token per action for a char-level model. Both
        spellings are accepted either way."""
        super().__init__(split=split, max_turns=max_turns)
        self.short_actions = bool(short_actions)
        if size < 2:
            raise ValueError(f"size={size!r} must be >= 2")
        if not 0.0 <= wall_prob < 1.0:
            raise ValueError(f"wall_prob={wall_prob!r} must be in [0, 1)")
        if not 1 <= min_path <= max_path:
            raise ValueError(f"need 1 <= min_path <= max_path, got {min_path}, {max_path}")
        self.size, self.wall_prob = size, wall_prob
        self.min_path, self.max_path = min_path, max_path
        self.pos: tuple[int, int] = (0, 0)
        self._dist_cache: dict[str, dict] = {}

    # --- task generation ----------------------------------------------------------------
    def _draw(self, rng) -> dict | None:
        n = self.size
        grid = [
            "".join("#" if rng.random() < self.wall_prob else "." for _ in range(n))
            for _ in range(n)
        ]
        free = [(r, c) for r in range(n) for c in range(n) if grid[r][c] == "."]
        if len(free) < 2:
            return None
        agent, goal = rng.sample(free, 2)
        dist = bfs_distances(set(free), agent).get(goal)
        if dist is None or not self.min_path <= dist <= self.max_path:
            return None
        return {"grid": grid, "agent": list(agent), "goal": list(goal)}

    def _sample_task(self, rng, split: str) -> dict:
        return sample_in_split(rng, split, self._draw)

    def _task_id(self, task: dict) -> str:
        return task_id_of(task)

    # --- episode ------------------------------------------------------------------------
    def _start(self, task: dict) -> str:
        grid = _check_grid_task(task, ("grid", "agent", "goal"), "#.")
        for key in ("agent", "goal"):
            r, c = task[key]
            if not (0 <= r < len(grid) and 0 <= c < len(grid[0])) or grid[r][c] != ".":
                raise ValueError(f"task[{key!r}]={task[key]!r} is not a free cell of the grid")
        self.pos = tuple(task["agent"])
        return self._render()

    def _render(self) -> str:
        rows = [list(row) for row in self.task["grid"]]
        gr, gc = self.task["goal"]
        rows[gr][gc] = "G"
        rows[self.pos[0]][self.pos[1]] = "A"
        return "\n".join("".join(row) for row in rows)

    def _instruction(self, task: dict) -> str:
        moves = "u, d, l or r" if self.short_actions else "up, down, left or right"
        return f"Maze: # wall, . free, A you, G goal. Reply with one move: {moves}. Reach G."

    def _spell(self, move: str) -> str:
        return move[0] if self.short_actions else move

    def _free(self, cell: tuple[int, int]) -> bool:
        r, c = cell
        grid = self.task["grid"]
        return 0 <= r < len(grid) and 0 <= c < len(grid[0]) and grid[r][c] == "."

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        move = parse_direction(action)
        if move is None:
            return "invalid move; use up/down/left/right\n" + self._render(), 0.0, False, False
        dr, dc = DIRECTIONS[move]
        nxt = (self.pos[0] + dr, self.pos[1] + dc)
        if self._free(nxt):  # bumping into a wall is a legal no-op
            self.pos = nxt
        won = self._won()
        return self._render(), float(won), won, True

    def _won(self) -> bool:
        return list(self.pos) == list(self.task["goal"])

    def _anchor(self) -> Any:
        return (self._task_id(self.task), self.pos)

    def _available_actions(self) -> list[str]:
        return [self._spell(m) for m in DIRECTIONS]

    def _goal_distances(self) -> dict:
        tid = self._task_id(self.task)
        if tid not in self._dist_cache:
            grid = self.task["grid"]
            free = {(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "."}
            self._dist_cache[tid] = bfs_distances(free, tuple(self.task["goal"]))
        return self._dist_cache[tid]

    def _potential(self) -> float:
        """Minus the BFS distance from A to G (0 at the goal), for reward shaping."""
        return -float(self._goal_distances().get(tuple(self.pos), 0))

    # --- oracle -------------------------------------------------------------------------
    def oracle_action(self) -> str:
        """A first move of a BFS shortest path to G (`up` once at G or if G is unreachable)."""
        dist = self._goal_distances()
        here = dist.get(self.pos)
        for move, (dr, dc) in DIRECTIONS.items():
            if here is not None and dist.get((self.pos[0] + dr, self.pos[1] + dc)) == here - 1:
                return self._spell(move)
        return "up"
