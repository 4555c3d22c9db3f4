"""`arborl/Sokoban-v0`: push boxes onto targets in a small walled room.

Rooms are solvable by construction: start from the solved state (boxes on targets) and
play random *pulls* backwards; every pull undone is a legal push. A BFS solver over
(player, boxes) then confirms the puzzle and its optimal length, which must lie in
[min_moves, max_moves]. The same solver is the oracle. XSB symbols: `#` wall, `_` floor,
`.` target, `$` box, `*` box on target, `@` player, `+` player on target. The search
heuristic (`heuristic`) scores the room shown by Manhattan distances, 0 for a dead end.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from arborl.envs.base import HeuristicView, TextEnv
from arborl.envs.builtin.maze import (
    DIRECTIONS,
    _check_grid_task,
    bfs_distances,
    grid_cells,
    parse_direction,
)
from arborl.envs.splits import sample_in_split, task_id_of

Cell = tuple[int, int]
State = tuple[Cell, tuple[Cell, ...]]  # (player, sorted boxes)


def _push(walls: set[Cell], state: State, move: str) -> State:
    """The state after `move`; bumping a wall or an immovable box leaves it unchanged."""
    (r, c), boxes = state
    dr, dc = DIRECTIONS[move]
    nxt = (r + dr, c + dc)
    if nxt in walls:
        return state
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if beyond in walls or beyond in boxes:
            return state
        boxes = tuple(sorted([b for b in boxes if b != nxt] + [beyond]))
    return (nxt, boxes)


def solve(walls: set[Cell], targets: set[Cell], state: State, max_depth: int = 200) -> list | None:
    """A shortest list of moves that puts every box on a target, or None (BFS)."""
    parent: dict[State, tuple[State, str] | None] = {state: None}
    queue = deque([(state, 0)])
    while queue:
        cur, depth = queue.popleft()
        if set(cur[1]) <= targets:
            path = []
            while parent[cur] is not None:
                cur, move = parent[cur]
                path.append(move)
            return path[::-1]
        if depth >= max_depth:
            continue
        for move in DIRECTIONS:
            nxt = _push(walls, cur, move)
            if nxt not in parent:
                parent[nxt] = (cur, move)
                queue.append((nxt, depth + 1))
    return None


def _cornered(walls: set[Cell], box: Cell) -> bool:
    """A box with a wall above or below and one left or right can never move again."""
    r, c = box
    vert = (r - 1, c) in walls or (r + 1, c) in walls
    horiz = (r, c - 1) in walls or (r, c + 1) in walls
    return vert and horiz


def heuristic(view: HeuristicView) -> float:
    """Search heuristic on the room shown: 1 / (1 + sum of box-to-nearest-target Manhattan
    distances + player-to-nearest-loose-box distance - 1); 0 for a box cornered off target
    (a dead end) or a room without boxes, targets or player; 1 once won."""
    if view.won:
        return 1.0
    cells = grid_cells(view.observation, "#_.$*@+")
    walls = {p for p, ch in cells.items() if ch == "#"}
    targets = [p for p, ch in cells.items() if ch in ".*+"]
    boxes = [p for p, ch in cells.items() if ch in "$*"]
    player = next((p for p, ch in cells.items() if ch in "@+"), None)
    if not boxes or not targets or player is None:
        return 0.0
    if any(b not in targets and _cornered(walls, b) for b in boxes):
        return 0.0

    def dist(p: Cell, q: Cell) -> int:
        return abs(p[0] - q[0]) + abs(p[1] - q[1])

    h = sum(min(dist(b, t) for t in targets) for b in boxes)
    loose = [b for b in boxes if b not in targets] or boxes
    h += min(dist(player, b) for b in loose) - 1
    return 1.0 / (1.0 + max(0, h))


class SokobanEnv(TextEnv):
    """Push all boxes onto targets; reward 1 when solved, `-step_penalty` per other step."""

    env_id = "arborl/Sokoban-v0"
    description = "Push every box ($) onto a target (.) in a small walled room."
    action_format = "up|down|left|right (or u/d/l/r)"
    default_max_turns = 30
    _state_attrs = ("player", "boxes")

    def __init__(
        self,
        width: int = 6,
        height: int = 6,
        num_boxes: int = 1,
        wall_prob: float = 0.1,
        num_pulls: int = 40,
        min_moves: int = 3,
        max_moves: int = 20,
        step_penalty: float = 0.0,
        split: str = "train",
        max_turns: int | None = None,
    ) -> None:
        super().__init__(split=split, max_turns=max_turns)
        if width < 3 or height < 3:
            raise ValueError(f"width={width!r}, height={height!r}: both must be >= 3")
        if num_boxes not in (1, 2):
            raise ValueError(f"num_boxes={num_boxes!r} must be 1 or 2")
        if not 0.0 <= wall_prob < 0.5:
            raise ValueError(f"wall_prob={wall_prob!r} must be in [0, 0.5)")
        if not 1 <= min_moves <= max_moves:
            raise ValueError(f"need 1 <= min_moves <= max_moves, got {min_moves}, {max_moves}")
        self.width, self.height, self.num_boxes = width, height, num_boxes
        self.wall_prob, self.num_pulls = wall_prob, num_pulls
        self.min_moves, self.max_moves = min_moves, max_moves
        self.step_penalty = float(step_penalty)
        self.player: Cell = (0, 0)
        self.boxes: tuple[Cell, ...] = ()
        self._plan_cache: dict[tuple, str | None] = {}

    # --- task generation ----------------------------------------------------------------
    def _draw(self, rng) -> dict | None:
        h, w = self.height + 2, self.width + 2
        rows = [
            [
                "#" if r in (0, h - 1) or c in (0, w - 1) or rng.random() < self.wall_prob else "_"
                for c in range(w)
            ]
            for r in range(h)
        ]
        free = [(r, c) for r in range(h) for c in range(w) if rows[r][c] == "_"]
        if len(free) < self.num_boxes + 3 or len(bfs_distances(set(free), free[0])) != len(free):
            return None  # too cramped, or the room is cut in two
        targets = rng.sample(free, self.num_boxes)
        boxes = set(targets)
        player = rng.choice([f for f in free if f not in boxes])
        for _ in range(self.num_pulls):  # reverse play: walk, sometimes pulling a box along
            dr, dc = DIRECTIONS[rng.choice(list(DIRECTIONS))]
            nxt, behind = (player[0] + dr, player[1] + dc), (player[0] - dr, player[1] - dc)
            if rows[nxt[0]][nxt[1]] == "#" or nxt in boxes:
                continue
            if behind in boxes and rng.random() < 0.8:
                boxes.remove(behind)
                boxes.add(player)
            player = nxt
        if boxes == set(targets):
            return None
        for r, c in targets:
            rows[r][c] = "."
        return {
            "grid": ["".join(row) for row in rows],
            "player": list(player),
            "boxes": sorted([list(b) for b in boxes]),
        }

    def _solution_ok(self, task: dict) -> bool:
        walls, targets = self._layout(task)
        state = (tuple(task["player"]), tuple(sorted(tuple(b) for b in task["boxes"])))
        plan = solve(walls, targets, state, max_depth=self.max_moves)
        return plan is not None and len(plan) >= self.min_moves

    def _sample_task(self, rng, split: str) -> dict:
        return sample_in_split(rng, split, self._draw, accept=self._solution_ok)

    def _task_id(self, task: dict) -> str:
        return task_id_of(task)

    @staticmethod
    def _layout(task: dict) -> tuple[set[Cell], set[Cell]]:
        grid = task["grid"]
        walls = {(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "#"}
        targets = {(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "."}
        return walls, targets

    # --- episode ------------------------------------------------------------------------
    def _start(self, task: dict) -> str:
        grid = _check_grid_task(task, ("grid", "player", "boxes"), "#_.")
        walls, targets = self._layout(task)
        cells = [tuple(task["player"])] + [tuple(b) for b in task["boxes"]]
        h, w = len(grid), len(grid[0])
        if any(not (0 <= r < h and 0 <= c < w) or (r, c) in walls for r, c in cells):
            raise ValueError(f"task player/boxes {cells} must be on floor cells of the grid")
        if len(set(cells)) != len(cells) or len(targets) != len(task["boxes"]):
            raise ValueError("task needs distinct player/box cells and one target per box")
        self.player = cells[0]
        self.boxes = tuple(sorted(cells[1:]))
        return self._render()

    def _render(self) -> str:
        rows = [list(row) for row in self.task["grid"]]
        for r, c in self.boxes:
            rows[r][c] = "*" if rows[r][c] == "." else "$"
        r, c = self.player
        rows[r][c] = "+" if rows[r][c] == "." else "@"
        return "\n".join("".join(row) for row in rows)

    def _instruction(self, task: dict) -> str:
        return (
            "Sokoban: # wall, _ floor, . target, $ box, * box on target, @ you (+ on target). "
            "Push every box onto a target; you cannot pull. "
            "Reply with one move: up, down, left or right."
        )

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        move = parse_direction(action)
        if move is None:
            return "invalid move; use up/down/left/right\n" + self._render(), 0.0, False, False
        walls, _ = self._layout(self.task)
        self.player, self.boxes = _push(walls, (self.player, self.boxes), move)
        won = self._won()
        return self._render(), 1.0 if won else 0.0 - self.step_penalty, won, True

    def _won(self) -> bool:
        _, targets = self._layout(self.task)
        return set(self.boxes) <= targets

    def _anchor(self) -> Any:
        return (self._task_id(self.task), self.player, self.boxes)

    def _available_actions(self) -> list[str]:
        return list(DIRECTIONS)

    # --- oracle -------------------------------------------------------------------------
    def oracle_action(self) -> str:
        """The first move of a BFS-optimal solution (`up` if solved or deadlocked)."""
        key = (self._task_id(self.task), self.player, self.boxes)
        if key not in self._plan_cache:
            walls, targets = self._layout(self.task)
            state = (self.player, self.boxes)
            plan = solve(walls, targets, state) or []
            # Every suffix of a shortest plan is shortest: cache each state on the path.
            for move in plan:
                self._plan_cache[(key[0], *state)] = move
                state = _push(walls, state, move)
            self._plan_cache.setdefault(key, None)
        return self._plan_cache[key] or "up"
