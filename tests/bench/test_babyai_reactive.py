"""`bench/babyai_reactive.py`: the rule reads the mission's object out of the text view and
walks to it, and the bench runs it on the BabyAI package beside random and the oracle."""

import json
import random
import subprocess
import sys

import pytest

from tests.bench._scripts import BENCH, load_script
from tests.envs.packages._real import set_up

br = load_script("babyai_reactive")

VIEW = (
    "Mission: go to the blue key\n"
    "You see a yellow ball 1 step forward and 1 step to the left; a blue key 2 steps forward "
    "and 3 steps to the right; a blue ball 3 steps to the left; a blue key 4 steps forward.\n"
    "Walls: 5 steps forward, 3 steps to the left.\nYou are carrying nothing."
)


def test_targets_are_the_missions_objects_only_with_their_offsets():
    assert br.targets(VIEW) == [(2, 3), (4, 0)]
    assert br.targets(VIEW.replace("go to the blue key", "go to the red box")) == []
    assert br.targets("Mission: go to a red box\nYou see a red box 2 steps to the left.") == [
        (0, -2)
    ]
    door = "Mission: go to the red door\nYou see a closed red door 3 steps forward; a red key 1 step to the left."
    assert br.targets(door) == [(3, 0)]
    with pytest.raises(ValueError, match="not a GoTo observation"):
        br.targets("Mission: pick up the red box\nYou see no objects.")


def test_the_rule_walks_toward_the_nearest_target_and_turns_when_blocked():
    rng = random.Random(0)
    assert br.reactive_action(VIEW, rng, 0.0) == "move forward"  # (4, 0) is nearest ahead
    side = "Mission: go to a red box\nYou see a red box 2 steps to the left."
    assert br.reactive_action(side, rng, 0.0) == "turn left"
    wall = side + "\nThere is a wall right in front of you."
    assert br.reactive_action(wall.replace("to the left", "to the right"), rng, 0.0) == "turn right"
    lost = "Mission: go to a red box\nYou see no objects.\nThere is a wall right in front of you."
    assert {br.reactive_action(lost, rng, 0.0) for _ in range(50)} == {"turn left", "turn right"}
    # epsilon 1: every action at random, forward included, even with the target in sight
    assert "turn left" in {br.reactive_action(VIEW, rng, 1.0) for _ in range(50)}


@pytest.mark.slow
def test_the_bench_runs_on_the_package_and_the_rule_beats_random(tmp_path, monkeypatch):
    set_up("babyai", monkeypatch)
    out = tmp_path / "r.json"
    cmd = [sys.executable, str(BENCH / "babyai_reactive.py"), "--episodes", "30",
           "--epsilon", "0.1", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["policy"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"reactive eps=0.1", "random", "oracle"}
    assert rows["oracle"]["success"] == 1.0
    assert rows["reactive eps=0.1"]["success"] > rows["random"]["success"] + 0.2
    assert "| reactive eps=0.1 |" in proc.stdout
