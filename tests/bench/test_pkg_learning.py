"""bench/pkg_learning.py: its command lines are valid configs, and --collect tabulates an
SFT run and an RL run started from its policy (here on Maze: the names are all it reads)."""

import json

import pytest

from arborl.cli.main import main
from arborl.train.config import load_train_config
from tests._status import owed_status
from tests.bench._scripts import load_script


def test_every_command_is_a_valid_config():
    bench = load_script("pkg_learning")
    cmds = bench.commands("runs/pkg")
    assert [c[0] for c in cmds] == ["sft", "train", "train"] * 2
    for cmd in cmds:
        cfg = load_train_config(cmd[1:])
        assert cfg.env.pool_mode == "subprocess" and cfg.eval.num_episodes == 32


@pytest.mark.slow  # an SFT run and an RL run at toy size (~10 s)
def test_collect_reads_the_sft_run_and_the_rl_run_from_it(tmp_path, capsys):
    bench = load_script("pkg_learning")
    toy = ["model.name_or_path=tiny-0.1m", "sft.num_demos=2", "sft.steps=3",
           "rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=3",
           "eval.num_episodes=3", "eval.every=0", "trainer.progress=false",
           "trainer.plots=false", "trainer.report=false", "trainer.loggers=[]"]  # fmt: skip
    assert main(["sft", *toy, "--out", str(tmp_path / "twx_coin_sft")]) == 0
    policy = tmp_path / "twx_coin_sft" / "checkpoints" / "sft" / "policy"
    assert main(["train", *toy, f"model.name_or_path={policy}", "sft.enabled=false",
                 "trainer.total_steps=1", f"trainer.output_dir={tmp_path}",
                 "trainer.name=twx_coin_grpo"]) == owed_status(tmp_path / "twx_coin_grpo")  # fmt: skip
    out = tmp_path / "c.json"
    bench.main(["--collect", str(tmp_path), "--out", str(out)])
    sft, grpo = json.loads(out.read_text())["runs"]
    assert (sft["run"], sft["sft_steps"], sft["after"]["episodes"]) == ("twx_coin_sft", 3, 3.0)
    assert grpo["run"] == "twx_coin_grpo" and grpo["rl_steps"] == 1
    assert grpo["gain"]["tasks"] == 3.0 and grpo["before"]["episodes"] == 3.0
    assert "| twx_coin_grpo | 1 |" in capsys.readouterr().out
