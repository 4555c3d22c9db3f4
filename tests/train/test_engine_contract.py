"""The engine seam, from outside arborl: a small engine written here drives `RLTrainer`
through steps, a save and a resume, the way `check_env` drives an env.

The engine lives in a module this test writes to a temporary folder (as a user's package
would), so it is reached the three ways a user reaches one: `RLTrainer(cfg, engine=...)`,
`trainer.engine=module:Class`, and an entry point in the `arborl.engines` group. It builds
its parts with arborl's public builders and does its own model work: a plain
policy-gradient step with SGD (no `actor_update`), its own checkpoint file.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from arborl.config import ConfigError
from arborl.train.config import load_train_config
from arborl.train.engine import ENGINE_METHODS, ENGINES, check_engine
from arborl.train.rl import RLTrainer

ENGINE_SRC = '''
"""A small engine outside arborl: REINFORCE with SGD over a tiny policy, its own files."""
import torch

from arborl.config import ConfigError
from arborl.generation.hf import HFBackend
from arborl.train import build, sft
from arborl.train.engine import RolloutOutput
from arborl.train.evaluate import evaluate_policy
from arborl.train.rollout_modes import rollout_step
from arborl.train.update import UpdateResult, response_logp

CALLS = []


class TinyEngine:
    name = "tiny"

    @classmethod
    def check_config(cls, cfg):
        CALLS.append("check_config")
        lr = cfg.trainer.engine_options.get("sgd_lr", 0.05)
        if not isinstance(lr, float) or lr <= 0:
            raise ConfigError(f"trainer.engine_options.sgd_lr={lr!r} must be a float > 0")

    def __init__(self, cfg, run_dir=None):
        self.cfg = cfg
        build.set_threads(cfg)
        self.model, self.tokenizer = build.build_policy(cfg)
        self.backend = HFBackend(self.model, self.tokenizer, max_batch_size=64)
        self.opt = torch.optim.SGD(
            self.model.parameters(), lr=cfg.trainer.engine_options.get("sgd_lr", 0.05)
        )
        self.pool = build.build_train_pool(cfg)
        self.updates = 0

    def prepare(self, warm_start):
        CALLS.append(f"prepare:{warm_start}")
        return sft.warm_start(self.model, self.tokenizer, self.cfg) if warm_start else None

    def rollout(self, plan, upcoming=None):
        CALLS.append(f"rollout:{plan.step}")
        self.model.eval()
        self.backend.forget_prompts()
        res = rollout_step(self.backend, self.tokenizer, self.pool, seeds=plan.seeds,
                           rollout_cfg=plan.rollout, cfg=self.cfg, split=self.cfg.env.train_split)
        return RolloutOutput(res.batch, res.trajectories, res.stats, {"tiny/rows": len(res.batch)})

    def reference_logp(self, batch, temperature):
        raise AssertionError("no KL in this run: the trainer must not ask for a reference")

    def values(self, batch):
        raise AssertionError("grpo has no critic: the trainer must not ask for values")

    def update(self, actor_minibatches, critic_minibatches, temperature, kl_coef):
        CALLS.append(f"update:{len(actor_minibatches)}")
        assert critic_minibatches is None
        self.model.train()
        for mb in actor_minibatches:
            logp, _, width = response_logp(
                self.model, mb, int(mb.info["prompt_length"]), temperature, False
            )
            mask = mb["response_mask"][:, :width].float()
            per_row = (logp * mask).sum(-1)
            loss = -(mb["adv"] * mb["weight"] * per_row).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.updates += 1
        return UpdateResult({"actor/pg_loss": float(loss.detach())}, 0)

    def scheduler_step(self):
        return self.opt.param_groups[0]["lr"]

    def sync_weights(self):
        return {}

    def evaluate(self, num_episodes=None):
        CALLS.append("evaluate")
        self.model.eval()
        self.backend.forget_prompts()
        return evaluate_policy(self.backend, self.tokenizer, self.cfg, num_episodes)

    def save(self, directory):
        CALLS.append("save")
        torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict()},
                   directory / "tiny_engine.pt")
        return {"tiny_updates": self.updates, "torch_rng": torch.get_rng_state(),
                "generation_backend": self.backend.state_dict()}

    def load(self, directory, state):
        CALLS.append("load")
        parts = torch.load(directory / "tiny_engine.pt", weights_only=True)
        self.model.load_state_dict(parts["model"])
        self.opt.load_state_dict(parts["opt"])
        self.updates = state["tiny_updates"]
        torch.set_rng_state(state["torch_rng"])
        self.backend.load_state_dict(state["generation_backend"])

    def close(self):
        CALLS.append("close")
        self.pool.close()
'''

TOY = [
    "model.name_or_path=tiny-0.1m",
    "sft.steps=20",
    "sft.num_demos=8",
    "sft.lr=3e-3",
    "sft.warmup_steps=2",
    "rollout.num_tasks=2",
    "rollout.group_size=4",
    "rollout.max_turns=3",
    "eval.num_episodes=4",
    "eval.every=0",
    "eval.save_episodes=2",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.report=false",
    "trainer.loggers=[]",
    "trainer.save_trajectories=0",
    "trainer.num_threads=1",
    "reward.sources={env: 1.0, invalid_action: 0.5}",
]


@pytest.fixture
def tiny_engine(tmp_path, monkeypatch):
    """The module `tiny_engine_pkg` (TinyEngine) written to a folder on sys.path."""
    src = tmp_path / "plugins"
    src.mkdir()
    (src / "tiny_engine_pkg.py").write_text(textwrap.dedent(ENGINE_SRC))
    monkeypatch.syspath_prepend(str(src))
    import tiny_engine_pkg

    tiny_engine_pkg.CALLS.clear()
    yield tiny_engine_pkg
    sys.modules.pop("tiny_engine_pkg", None)


def _cfg(tmp_path, name, *extra):
    return load_train_config([*TOY, f"trainer.output_dir={tmp_path}", f"trainer.name={name}",
                              *extra])  # fmt: skip


def _weights(engine):
    return {k: v.clone() for k, v in engine.model.state_dict().items()}


def test_an_outside_engine_runs_steps_saves_and_resumes_exactly(tmp_path, tiny_engine):
    spec = "trainer.engine=tiny_engine_pkg:TinyEngine"
    # 4 steps straight, the engine passed as an instance
    cfg = _cfg(tmp_path, "straight", spec, "trainer.total_steps=4", "trainer.save_every=2")
    straight = RLTrainer(cfg, engine=tiny_engine.TinyEngine(cfg))
    summary = straight.fit()
    calls = tiny_engine.CALLS
    assert calls[:3] == ["check_config", "prepare:True", "evaluate"]
    assert [c for c in calls if c.startswith("rollout")] == [f"rollout:{s}" for s in range(4)]
    assert calls.count("save") == 2 and calls[-2:] == ["evaluate", "close"]
    assert straight.engine.updates > 0 and summary["steps"] == 4
    assert summary["after"]["episodes"] == 4.0 and "success_lo" in summary["after"]
    eval_files = sorted(p.name for p in (straight.run.path / "eval_episodes").iterdir())
    assert eval_files == ["step-00000.jsonl", "step-00004.jsonl"]  # eval.save_episodes
    rows = [json.loads(line) for line in (straight.run.path / "metrics.jsonl").open()]
    steps = [r for r in rows if "tiny/rows" in r]
    assert len(steps) == 4
    for r in steps:  # the engine's own metrics pass through; the time split is complete
        assert {"time/rollout_s", "time/rewards_s", "time/advantages_s", "time/update_s",
                "time/weight_sync_s", "time/other_s"} <= set(r)  # fmt: skip
        assert "time/values_s" not in r and "time/ref_logp_s" not in r  # not asked for
    final = _weights(straight.engine)

    # 2 steps, a checkpoint, then a new trainer resumes: the engine by module:attr name
    tiny_engine.CALLS.clear()
    first = RLTrainer(_cfg(tmp_path, "resumed", spec, "trainer.total_steps=2"))
    assert type(first.engine).__name__ == "TinyEngine"
    first.fit()
    tiny_engine.CALLS.clear()
    second = RLTrainer(
        _cfg(tmp_path, "resumed", spec, "trainer.total_steps=4", "trainer.resume=auto")
    )
    second.fit()
    assert tiny_engine.CALLS[:3] == ["check_config", "prepare:False", "load"]
    assert [c for c in tiny_engine.CALLS if c.startswith("rollout")] == ["rollout:2", "rollout:3"]
    assert second.engine.updates == straight.engine.updates
    resumed = _weights(second.engine)
    assert resumed.keys() == final.keys()
    assert all(torch.equal(resumed[k], final[k]) for k in final), "resume is not exact"


def test_engine_settings_and_protocol_are_checked_before_any_work(tmp_path, tiny_engine):
    with pytest.raises(ConfigError, match=r"trainer.engine_options.sgd_lr=-1.0 must be"):
        RLTrainer(_cfg(tmp_path, "bad", "trainer.engine=tiny_engine_pkg:TinyEngine",
                       "trainer.engine_options={sgd_lr: -1.0}"))  # fmt: skip
    assert not (tmp_path / "bad").exists()  # no run folder for a run that cannot start
    with pytest.raises(ConfigError, match="engine_options.*read by plug-in engines only"):
        RLTrainer(_cfg(tmp_path, "bad", "trainer.engine_options={sgd_lr: 0.1}"))
    with pytest.raises(ConfigError, match="no attribute 'Nope'"):
        RLTrainer(_cfg(tmp_path, "bad", "trainer.engine=tiny_engine_pkg:Nope"))

    class Half:
        name = "half"

        def rollout(self, plan, upcoming=None): ...

    with pytest.raises(TypeError, match="missing check_config, prepare, reference_logp"):
        check_engine(Half)
    for cls in (ENGINES.get("local"), tiny_engine.TinyEngine):
        check_engine(cls)  # the built-in and the outside one implement every method
    assert len(ENGINE_METHODS) == 12


def test_arborl_train_reaches_an_engine_by_entry_point(tmp_path, tiny_engine):
    """`arborl train trainer.engine=tiny`, the name coming from an installed distribution's
    `arborl.engines` entry point (a dist-info folder on the path, as pip would write)."""
    plugins = tmp_path / "plugins"
    info = plugins / "tiny_engine_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-engine-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[arborl.engines]\ntiny = tiny_engine_pkg:TinyEngine\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "train", *TOY, "trainer.engine=tiny",
         "trainer.total_steps=2", f"trainer.output_dir={tmp_path}", "trainer.name=ep"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "ep" / "summary.json").read_text())
    assert summary["steps"] == 2
    assert (tmp_path / "ep" / "checkpoints" / "step-2" / "tiny_engine.pt").is_file()
