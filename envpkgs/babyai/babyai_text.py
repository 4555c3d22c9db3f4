"""arborl's language view of a BabyAI observation (minigrid ships only an ASCII map).

The agent sees a 7x7 egocentric window: it stands at the bottom centre, facing up. Each
visible object that is not floor or wall is described by colour, type, state and offset
("a red ball 2 steps forward and 1 step to the left"), nearest first; the cell ahead is
named too, so "a wall right in front of you" tells the agent it cannot move. Doors say
their state (open, closed, locked); a box is named like any object (it may hold one:
toggling it opens it and leaves what it held). Walls are otherwise silent, so in the
multi-room levels a line gives the nearest wall straight ahead, to the left and to the
right ("Walls: 3 steps forward, 1 step to the left."); the view does not see through
walls, and what is behind one is never described. This is the
kind of view BabyAI-Text (GLAM) and BALROG give their agents; its wording is arborl's.
Pure numpy over `obs["image"]`, so it is tested without a simulator.

`describe_compact` says the same in about half the words, for small models whose every
token costs (`BabyAIEnv(view="compact")`): the mission alone on the first line, then

    red ball 2 forward 1 left; purple box 3 forward
    ahead: wall
    walls: 1 forward, 2 left
    holding: nothing
"""

from __future__ import annotations

from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT, STATE_TO_IDX

IDX_TO_STATE = {v: k for k, v in STATE_TO_IDX.items()}
AGENT_COL, AGENT_ROW = 3, 6
"""The agent's cell in the 7x7 egocentric image (x = column, y = row)."""
SILENT = {"empty", "floor", "unseen", "wall", "agent"}


def _steps(n: int, word: str) -> str:
    return f"{n} step{'s' if n != 1 else ''} {word}"


def _offset(col: int, row: int) -> str:
    ahead, side = AGENT_ROW - row, col - AGENT_COL
    parts = [_steps(ahead, "forward")] if ahead else []
    if side:
        parts.append(_steps(abs(side), "to the right" if side > 0 else "to the left"))
    return " and ".join(parts) if parts else "here"


def _short_offset(col: int, row: int) -> str:
    ahead, side = AGENT_ROW - row, col - AGENT_COL
    parts = [f"{ahead} forward"] if ahead else []
    if side:
        parts.append(f"{abs(side)} {'right' if side > 0 else 'left'}")
    return " ".join(parts) if parts else "here"


def _name(obj: str, color_idx: int, state_idx: int) -> str:
    color = IDX_TO_COLOR[color_idx]
    if obj == "door":
        return f"a {IDX_TO_STATE[state_idx]} {color} door"
    return f"a {color} {obj}"


def _wall_distances(image) -> list[tuple[int, str]]:
    """(steps, direction) of the nearest wall straight ahead, to the left and to the right
    of the agent, within the view."""
    rays = (
        ("forward", [(AGENT_COL, AGENT_ROW - d) for d in range(1, AGENT_ROW + 1)]),
        ("to the left", [(AGENT_COL - d, AGENT_ROW) for d in range(1, AGENT_COL + 1)]),
        ("to the right", [(AGENT_COL + d, AGENT_ROW) for d in range(1, image.shape[0] - AGENT_COL)]),
    )  # fmt: skip
    found = []
    for word, cells in rays:
        for d, (col, row) in enumerate(cells, start=1):
            if IDX_TO_OBJECT[int(image[col, row, 0])] == "wall":
                found.append((d, word))
                break
    return found


def _walls(image) -> str:
    found = [_steps(d, word) for d, word in _wall_distances(image)]
    return "Walls: " + ", ".join(found) + "." if found else "No walls in sight."


def _objects(image, offset) -> list[str]:
    """'<name> <offset>' of every visible object that is not floor or wall, nearest first."""
    seen = []
    for col in range(image.shape[0]):
        for row in range(image.shape[1]):
            obj = IDX_TO_OBJECT[int(image[col, row, 0])]
            if obj in SILENT or (col, row) == (AGENT_COL, AGENT_ROW):
                continue
            dist = (AGENT_ROW - row) + abs(col - AGENT_COL)
            name = _name(obj, int(image[col, row, 1]), int(image[col, row, 2]))
            seen.append((dist, col, row, f"{name} {offset(col, row)}"))
    return [s[3] for s in sorted(seen)]


def _ahead(image) -> str | None:
    """'wall', the name of the object right in front of the agent, or None."""
    ahead = IDX_TO_OBJECT[int(image[AGENT_COL, AGENT_ROW - 1, 0])]
    if ahead == "wall":
        return "wall"
    if ahead in SILENT:
        return None
    cell = image[AGENT_COL, AGENT_ROW - 1]
    return _name(ahead, int(cell[1]), int(cell[2]))


def describe(image, carrying: str | None = None) -> str:
    """The text view of one egocentric `image` (shape (7, 7, 3): object, colour, state)."""
    seen = _objects(image, _offset)
    lines = ["You see " + "; ".join(seen) + "." if seen else "You see no objects."]
    ahead = _ahead(image)
    if ahead == "wall":
        lines.append("There is a wall right in front of you.")
    elif ahead is not None:
        lines.append(f"Right in front of you is {ahead}.")
    lines.append(_walls(image))
    lines.append(f"You are carrying {carrying}." if carrying else "You are carrying nothing.")
    return "\n".join(lines)


def describe_compact(image, carrying: str | None = None) -> str:
    """`describe`'s facts in fewer words (no articles, "2 forward 1 left" offsets)."""
    seen = [s.removeprefix("a ") for s in _objects(image, _short_offset)]
    lines = ["; ".join(seen) if seen else "no objects"]
    ahead = _ahead(image)
    if ahead is not None:
        lines.append(f"ahead: {ahead.removeprefix('a ')}")
    walls = [f"{d} {word.removeprefix('to the ')}" for d, word in _wall_distances(image)]
    lines.append("walls: " + (", ".join(walls) if walls else "none"))
    lines.append(f"holding: {carrying.removeprefix('a ') if carrying else 'nothing'}")
    return "\n".join(lines)
