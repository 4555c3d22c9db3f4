"""`arborl compare` (arborl.grid.compare): a grid pairs its arms on one start per seed and
the same held-out tasks and sampling seed, and a second call runs only what is missing.

Toy size (tiny-0.1m, 1-2 RL steps, 4 held-out episodes): every run takes about a second.
"""

import json
import shutil

import pytest

import arborl.grid.compare as grid_mod
from arborl.cli.main import main
from arborl.config import ConfigError, from_dict
from arborl.grid.compare import CompareConfig, GridConflict, cell_status, plan_grid, run_grid

TOY = [
    "model.name_or_path=tiny-0.1m", "rollout.num_tasks=2", "rollout.group_size=2",
    "rollout.max_turns=3", "eval.num_episodes=4", "eval.every=1", "eval.every_episodes=2",
    "trainer.total_steps=2", "trainer.progress=false", "trainer.plots=false",
    "trainer.report=false", "trainer.loggers=[]", "trainer.save_trajectories=0",
]  # fmt: skip


BARE = [o for o in TOY if not o.startswith("model.")]
"""TOY for a grid whose start is the model itself (start=tiny-0.1m)."""


def _episodes(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_arms_of_a_seed_share_the_start_the_tasks_and_the_sampling(tmp_path, capsys):
    out = tmp_path / "grid"
    fast = [*TOY, "trainer.total_steps=1", "eval.every=0"]
    argv = [
        "compare",
        *fast,
        "--sft",
        "sft.steps=2",
        "sft.num_demos=2",
        "--algos",
        "grpo",
        "gigpo",
        "--seeds",
        "0",
        "1",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "gain over the start" in printed and "| gigpo - grpo |" in printed
    doc = json.loads((out / "comparison.json").read_text())
    assert [c["run"] for c in doc["cells"]] == [
        "sft-s0",
        "grpo-s0",
        "gigpo-s0",
        "sft-s1",
        "grpo-s1",
        "gigpo-s1",
    ]
    assert (out / "comparison.txt").read_text().strip() in printed
    assert (out / "report.html").exists() and (out / "grid.yaml").exists()
    first_eval = {}
    for r in doc["runs"]:
        cfg = (out / r["run"] / "config.yaml").read_text()
        start = out / f"sft-s{r['seed']}" / "checkpoints" / "sft" / "policy"
        assert f"name_or_path: {start}" in cfg and f"  seed: {r['seed']}" in cfg
        first_eval[r["run"]] = _episodes(out / r["run"] / "eval_episodes" / "step-00000.jsonl")
        # the start's own held-out evaluation is the run's "before": same policy, same tasks
        (start_eval,) = [s for s in doc["starts"] if s["seed"] == r["seed"]]
        assert r["before"]["success"] == start_eval["success"]
    tasks = {run: [e["task_id"] for e in eps] for run, eps in first_eval.items()}
    assert len({tuple(t) for t in tasks.values()}) == 1 and len(tasks["grpo-s0"]) == 4
    # same start and sampling seed: the arms of a seed played the same episodes before RL
    for seed in (0, 1):
        a, b = first_eval[f"grpo-s{seed}"], first_eval[f"gigpo-s{seed}"]
        assert [[s["action"] for s in e["steps"]] for e in a] == [
            [s["action"] for s in e["steps"]] for e in b
        ]
    (pair,) = doc["paired"]
    assert (pair["a"], pair["b"], pair["seeds"], pair["left_out"]) == ("gigpo", "grpo", [0, 1], [])
    assert [a["seeds"] for a in doc["arms"]] == [[0, 1], [0, 1]]


def test_a_second_call_runs_only_what_is_missing_and_resumes_half_runs(tmp_path, monkeypatch):
    calls = []
    real = grid_mod.run_cell

    def spy(kind, overrides):
        calls.append(next(o.split("=", 1)[1] for o in overrides if o.startswith("trainer.name=")))
        calls[-1] += " resume" if "trainer.resume=auto" in overrides else ""
        return real(kind, overrides)

    monkeypatch.setattr(grid_mod, "run_cell", spy)
    base = {"base": BARE, "start": "tiny-0.1m", "seeds": [0], "out": str(tmp_path / "g")}
    one = from_dict(CompareConfig, {**base, "arms": {"grpo": ["algo=grpo"]}})
    run_grid(one, echo=lambda _: None)
    assert calls == ["grpo-s0"]
    summary = tmp_path / "g" / "grpo-s0" / "summary.json"
    finished = summary.read_text()
    # the grid grows an arm: the finished run is collected, only the missing one runs
    two = from_dict(CompareConfig, {**base, "arms": {"grpo": ["algo=grpo"], "raft": ["algo=raft"]}})
    result = run_grid(two, echo=lambda _: None)
    assert calls == ["grpo-s0", "raft-s0"] and summary.read_text() == finished
    assert [c["status"] for c in result["cells"]] == ["done", "new"]
    assert [a["arm"] for a in result["arms"]] == ["grpo", "raft"]
    # a run that stopped after its last checkpoint resumes from it (its before-RL
    # evaluation comes back with the checkpoint, so its gain stays paired)
    (tmp_path / "g" / "raft-s0" / "summary.json").unlink()
    result = run_grid(two, echo=lambda _: None)
    assert calls[2:] == ["raft-s0 resume"]
    assert [c["status"] for c in result["cells"]] == ["done", "resume"]
    raft = next(r for r in result["runs"] if r["arm"] == "raft")
    assert raft["finished"] and raft["gain"] is not None and raft["before"] is not None
    # collecting runs nothing
    run_grid(two, collect_only=True, echo=lambda _: None)
    assert len(calls) == 3
    # an arm redefined under the same name is not silently mixed with the old runs
    changed = from_dict(CompareConfig, {**base, "arms": {"grpo": ["algo=grpo", "algo.lr=1e-4"]}})
    with pytest.raises(GridConflict, match="--fresh"):
        cell_status(changed, plan_grid(changed)[0])
    assert cell_status(changed, plan_grid(changed)[0], replace=True) == "rerun"


def test_a_folder_another_trainer_holds_is_left_alone(tmp_path):
    from arborl.train.runlog import RunDir

    cfg = from_dict(
        CompareConfig,
        {
            "base": BARE,
            "start": "tiny-0.1m",
            "seeds": [0],
            "arms": {"grpo": []},
            "out": str(tmp_path),
        },
    )
    held = RunDir(tmp_path / "grpo-s0")
    try:
        assert cell_status(cfg, plan_grid(cfg)[0]) == "busy"
    finally:
        held.close()
    assert cell_status(cfg, plan_grid(cfg)[0], fresh=True) == "rerun"


@pytest.mark.parametrize(
    "grid, match",
    [
        ({"arms": {"a": ["eval.seed=3"]}}, r"compare.arms.a\[0\]='eval.seed=3'"),
        ({"arms": {"a": ["env.kwargs.size=5"]}}, "every arm of a seed shares it"),
        ({"arms": {"a": ["sft.steps=5"]}}, "start=own"),
        ({"arms": {"a": ["sft.steps=5"]}, "start": "own"}, None),
        ({"arms": {"a": []}, "base": ["trainer.seed=1"]}, "the grid sets it"),
        ({"arms": {"a": []}, "start": "runs/x/policy", "sft": ["sft.steps=1"]}, "trains no SFT"),
        # env=... after --sft on the command line: the RL runs would run the default env
        ({"arms": {"a": []}, "sft": ["sft.steps=1", "env=babyai"]}, r"sft\[1\]='env=babyai'.*base"),
        ({"arms": {"a": []}, "sft": ["agent.max_obs_chars=null"]}, "before --sft and --arm"),
        (
            {
                "arms": {"a": []},
                "sft": ["sft.lr=1e-3", "model.name_or_path=x", "trainer.num_threads=1"],
            },
            None,
        ),
        ({"arms": {"a": []}, "sft": ["env=babyai"], "start": "own"}, None),
        ({"arms": {"a": []}, "pairs": [["a", "b"]]}, "not two of the arms"),
        ({"arms": {"sft": []}}, "cannot name a run folder"),
        ({"arms": {}}, "arms is empty"),
    ],
)
def test_settings_that_would_break_the_pairing_fail_before_any_work(grid, match):
    if match is None:
        from_dict(CompareConfig, grid, prefix="compare.")
    else:
        with pytest.raises(ConfigError, match=match):
            from_dict(CompareConfig, grid, prefix="compare.")


def test_every_compare_field_has_a_docstring():
    from arborl.config import iter_fields

    assert [p for p, _f, _tp, doc in iter_fields(CompareConfig) if not doc.strip()] == []


def test_an_rl_run_from_an_older_start_is_never_compared_as_if_from_the_new_one(tmp_path):
    """A start trained again (its numbers changed) by a call that stopped before the RL
    runs were rerun: `--collect` leaves the old RL run out as "stale", and the next call
    reruns it. The retrain is simulated by changing the start's recorded loss, as a
    retrain with other numbers would."""
    base = {"base": TOY, "sft": ["sft.steps=2", "sft.num_demos=2"], "seeds": [0]}
    cfg = from_dict(CompareConfig, {**base, "arms": {"a": []}, "out": str(tmp_path / "g")})
    assert [c["status"] for c in run_grid(cfg, echo=lambda _: None)["cells"]] == ["new", "new"]
    start = tmp_path / "g" / "sft-s0" / "summary.json"
    assert (tmp_path / "g" / "a-s0" / "compare_start.json").exists()
    # the same start, moved to another grid folder, is still the start its RL run began from
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "g", moved)
    cfg_moved = from_dict(CompareConfig, {**base, "arms": {"a": []}, "out": str(moved)})
    result = run_grid(cfg_moved, collect_only=True, echo=lambda _: None)
    assert [c["status"] for c in result["cells"]] == ["done", "done"] and result["runs"]
    doc = json.loads(start.read_text())
    doc["sft"]["sft/loss"] += 0.5
    start.write_text(json.dumps(doc))
    said = []
    result = run_grid(cfg, collect_only=True, echo=said.append)
    assert [c["status"] for c in result["cells"]] == ["done", "stale"]
    assert result["runs"] == [] and any("a-s0" in x and "trained again" in x for x in said)
    start.unlink()  # a start whose retrain stopped half-way: its RL run is stale too
    said.clear()
    result = run_grid(cfg, collect_only=True, echo=said.append)
    assert result["runs"] == [] and any("unfinished" in x for x in said)
    # a start folder deleted outright (to save space) says nothing against its runs
    shutil.copytree(tmp_path / "g" / "sft-s0", tmp_path / "kept")
    shutil.rmtree(tmp_path / "g" / "sft-s0")
    assert run_grid(cfg, collect_only=True, echo=lambda _: None)["runs"]
    shutil.copytree(tmp_path / "kept", tmp_path / "g" / "sft-s0")
    # the next call retrains the start and reruns the run from it
    result = run_grid(cfg, echo=lambda _: None)
    assert [c["status"] for c in result["cells"]] == ["rerun", "rerun"] and result["runs"]
    start.write_text(json.dumps({**json.loads(start.read_text()), "sft": doc["sft"]}))
    assert grid_mod.plan_statuses(cfg, plan_grid(cfg)) == ["done", "rerun"]


# --- review-3 defect 13: one compare per --out; a damaged cell file is one error line ----
GRID_ARGS = [*BARE, "--arm", "grpo", "--start", "tiny-0.1m", "--seeds", "0"]


@pytest.mark.fault("concurrent compare")
def test_a_second_compare_on_the_same_out_is_refused_and_leaves_the_results_alone(tmp_path, capsys):
    import os

    from arborl.grid.guard import grid_lock

    (tmp_path / "comparison.json").write_text('{"first": "compare"}')
    with grid_lock(tmp_path):  # the first compare, still running
        rc = main(["compare", "--out", str(tmp_path), *GRID_ARGS])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: grid folder"), err
    assert str(tmp_path) in err[0] and f"pid {os.getpid()}" in err[0]  # names the other one
    assert (tmp_path / "comparison.json").read_text() == '{"first": "compare"}'
    assert not (tmp_path / "grpo-s0").exists()  # nothing was started
    with grid_lock(tmp_path):  # free again once the first ends
        pass


def test_a_damaged_cell_file_is_one_line_naming_it_and_the_fix(tmp_path, capsys):
    marker = tmp_path / "grpo-s0" / "compare_cell.json"
    marker.parent.mkdir(parents=True)
    marker.write_text('{"kind": "rl", "arm"')  # cut short
    rc = main(["compare", "--out", str(tmp_path), *GRID_ARGS])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err  # no traceback
    assert str(marker) in err[0] and "is damaged" in err[0] and "--replace" in err[0]
    lines = []
    cfg = from_dict(
        CompareConfig,
        {"base": BARE, "start": "tiny-0.1m", "seeds": [0], "arms": {"grpo": []},
         "out": str(tmp_path)},
    )  # fmt: skip
    run_grid(cfg, collect_only=True, echo=lines.append)  # collecting skips it, saying why
    assert any(x.startswith("skipped: ") and str(marker) in x for x in lines), lines
    assert cell_status(cfg, plan_grid(cfg)[0], replace=True) == "rerun"
