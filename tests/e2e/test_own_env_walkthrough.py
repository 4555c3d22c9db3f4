"""docs/envs.md's "Your own env in 10 minutes", run as the docs write it, from a package
outside arborl: the Tower of Hanoi example package copied to a temporary folder and made
visible by a `newbie_hanoi-0.1.dist-info` folder (its `arborl.envs` and
`arborl.env_configs` entry points) on the PYTHONPATH of each command, instead of `pip
install -e .`, so nothing is installed into the project's environment.

The commands are read from the docs' block, so the docs cannot drift from what runs; each gets a few toy-size
arguments appended (later flags and keys win) and runs in bash with this interpreter's bin
folder first on PATH, so `arborl` and `python` are the project's.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.envs._hanoi import HANOI_ID, HANOI_SRC, install_hanoi

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs" / "envs.md"
HEADING = "### Your own env in 10 minutes"  # in docs/envs.md and README.md's Quickstart

# Toy size, appended to the docs' commands: the tiny model, a few demos and steps, short
# episodes and a 4-task evaluation; no plots, trackers or progress bars.
QUIET = ["trainer.progress=false", "trainer.plots=false", "trainer.loggers=[]"]
TOY_RUN = ["rollout.max_turns=4", "eval.num_episodes=4", *QUIET]
TOY = {
    "arborl env demos": ["--num-episodes", "8"],
    "arborl sft": ["model.name_or_path=tiny-0.1m", "sft.steps=2", *TOY_RUN],
    "arborl train": [
        "trainer.total_steps=2",
        "rollout.num_tasks=2",
        "rollout.group_size=4",
        "eval.every=0",
        *TOY_RUN,
    ],
}


def walkthrough_block(path: Path) -> str:
    """The first bash block of `path`'s walkthrough section."""
    text = path.read_text()
    assert HEADING in text, f"{path.name} lost its {HEADING!r} section"
    block = re.search(r"```bash\n(.*?)```", text[text.index(HEADING) :], re.S)
    assert block, f"{path.name}'s {HEADING!r} section has no bash block"
    return block.group(1)


def walkthrough() -> list[list[str]]:
    """The docs' walkthrough, one token list per command (continuations joined, comments
    dropped)."""
    lines = walkthrough_block(DOCS).replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.strip()]


def name_of(tokens: list[str]) -> str:
    """The command a line runs after any pipe: 'arborl env demos', 'arborl sft', ..."""
    while "|" in tokens:
        tokens = tokens[tokens.index("|") + 1 :]
    return " ".join(tokens[:3] if tokens[:2] == ["arborl", "env"] else tokens[:2])


def run_line(tokens: list[str], cwd: Path, env: dict) -> str:
    """Run one docs line (with its toy arguments) in bash; its stdout and stderr."""
    tokens = tokens + TOY.get(name_of(tokens), [])
    line = " ".join(t if t == "|" else shlex.quote(t) for t in tokens)
    out = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    # 3: a toy-size RL run with no learning signal, which says so (docs/training.md, "A run
    # that learned nothing"); every other line must succeed
    learned_nothing = (
        name_of(tokens) == "arborl train" and "error: nothing was learned" in out.stderr
    )
    assert out.returncode == (3 if learned_nothing else 0), (
        f"{line}\nexit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    )
    return out.stdout + out.stderr


def test_the_docs_walkthrough_runs_from_a_package_outside_arborl(tmp_path):
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "arborl").exists(), f"no arborl script beside {sys.executable}"
    pkg = tmp_path / "newbie-hanoi"  # the user's folder, where the docs' commands run
    shutil.copytree(HANOI_SRC, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    install_hanoi(site)  # the dist-info only: the package is found in `pkg`, not in tests/
    home = tmp_path / "home"  # anything written to ~ stays in tmp_path
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(site), str(pkg)]),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    env.pop("ARBORL_CACHE", None)

    commands = walkthrough()
    names = [name_of(c) for c in commands]
    steps = ["pip install", "python -c", "arborl env check", "arborl env play"]
    for step in steps + ["arborl env demos", "arborl sft", "arborl train"]:
        assert step in names, f"the walkthrough lost its {step!r} step: {names}"
    outputs = {}
    for tokens, name in zip(commands, names):
        if name == "pip install":
            assert tokens == ["pip", "install", "-e", "."]  # the dist-info in `site` stands in
            continue
        outputs[name] = run_line(tokens, pkg, env)

    # 1. the entry point: Gymnasium makes the env right after `import arborl.envs`
    assert f"GymTextEnv<{HANOI_ID}>" in outputs["python -c"]
    # 2. the conformance checks and the oracle's suggestion
    assert "1/1 envs passed" in outputs["arborl env check"]
    assert "(oracle: " in outputs["arborl env play"]
    # 3. demos with mistakes: the oracle wins every one, some turns are marked untrained
    demos_cmd = commands[names.index("arborl env demos")]
    assert "--epsilon" in demos_cmd
    assert "oracle success: 8/8 (100.0%)" in outputs["arborl env demos"]
    demos = pkg / demos_cmd[demos_cmd.index("--out") + 1]
    turn_loss = [f for line in demos.open() for f in json.loads(line)["meta"]["turn_loss"]]
    assert False in turn_loss and True in turn_loss
    # 4. SFT from those demos
    sft = json.loads((pkg / "runs" / "hanoi-sft" / "summary.json").read_text())
    assert sft["sft"]["sft/demos"] == 8
    assert (pkg / sft["policy"] / "model.safetensors").exists()
    # 5. GRPO from the SFT policy, with the env and agent settings of the package's group
    run = pkg / "runs" / "hanoi-grpo"
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["env"]["id"] == HANOI_ID and cfg["env"]["kwargs"] == {"num_disks": 3}
    assert cfg["rollout"]["max_new_tokens"] == 4  # the group's `_root_` section
    assert cfg["model"]["name_or_path"] == sft["policy"] and cfg["algo"]["name"] == "grpo"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2
    # 6. the comparison: the same held-out tasks before and after RL, paired; "before" is
    # the SFT policy, evaluated as `arborl sft` did
    out = outputs["arborl train"]
    for line in ("success before RL", "success after RL", "RL gain on the same tasks"):
        assert line in out, out[-2000:]
    assert summary["before"] == sft["after"]
    assert summary["gain"]["tasks"] == 4
    assert (run / "report.html").exists()
