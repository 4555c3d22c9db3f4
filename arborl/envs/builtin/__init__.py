"""The envs that ship with arborl, one module per game, and their registrations.

Each game module holds the env, its oracle and, where a game has one, its search
heuristic; `BUILTIN_ENVS` names them as `"module:attr"` strings so that nothing here is
imported until `make` (or a search) asks for it.
"""

from __future__ import annotations

from arborl.envs.registry import register

BUILTIN_ENVS: list[dict] = [
    dict(
        id="arborl/Maze-v0",
        entry_point="arborl.envs.builtin.maze:MazeEnv",
        heuristic="arborl.envs.builtin.maze:heuristic",
        max_turns=16,
        description="Walk A to G on a 6x6 grid maze (# wall, . free).",
    ),
    dict(
        id="arborl/Sokoban-v0",
        entry_point="arborl.envs.builtin.sokoban:SokobanEnv",
        heuristic="arborl.envs.builtin.sokoban:heuristic",
        max_turns=30,
        description="Push the box onto the target in a 6x6 walled room.",
    ),
    dict(
        id="arborl/FrozenLake-v0",
        entry_point="arborl.envs.builtin.frozenlake:FrozenLakeEnv",
        max_turns=20,
        description="Cross a 5x5 frozen lake from S to G avoiding holes (slippery=False).",
    ),
    dict(
        id="arborl/Countdown-v0",
        entry_point="arborl.envs.builtin.countdown:CountdownEnv",
        heuristic="arborl.envs.builtin.countdown:heuristic",
        max_turns=8,
        description="Combine 4 numbers (1-13) with + - * / to reach a target (10-100).",
    ),
    dict(
        id="arborl/Game24-v0",
        entry_point="arborl.envs.builtin.countdown:CountdownEnv",
        heuristic="arborl.envs.builtin.countdown:heuristic",
        kwargs={"target": 24, "num_numbers": 4, "min_number": 1, "max_number": 13},
        max_turns=8,
        description="Make 24 from four numbers 1-13 with + - * /.",
    ),
    dict(
        id="arborl/Wordle-v0",
        entry_point="arborl.envs.builtin.wordle:WordleEnv",
    ),
    dict(
        id="arborl/WebShop-v0",
        entry_point="arborl.envs.builtin.webshop:WebShopEnv",
    ),
    dict(
        id="arborl/ToolQA-v0",
        entry_point="arborl.envs.builtin.toolqa:ToolQAEnv",
    ),
    dict(
        id="arborl/SQL-v0",
        entry_point="arborl.envs.builtin.sql:SQLEnv",
    ),
    dict(
        id="arborl/Tasks-v0",
        entry_point="arborl.envs.builtin.tasklist:TaskListEnv",
        description="Your own tasks from a JSONL file (env.kwargs.path): prompt, data, answer.",
        baselines=False,
    ),
]
"""One `register(**entry)` call per built-in env. No `max_turns` keeps the env's default; no
`description` lets `arborl env list` show the class's own."""


def register_builtin_envs() -> None:
    for entry in BUILTIN_ENVS:
        register(**entry)
