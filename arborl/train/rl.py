"""The one RL loop: rollout -> rewards -> ref logprobs -> values -> advantages -> PPO
minibatches -> critic -> weight sync -> metrics, one RL step after another.

    trainer = RLTrainer(load_train_config(["algo=grpo"]))   # trainer.engine=local|ray
    summary = trainer.fit()

`RLTrainer` holds the only copy of the loop's decisions (step seeds, rewards, advantages,
the minibatch order, KL control, the bad-step guard, metrics, trajectory dumps, the
evaluation cadence and the atomic checkpoint writer). Where the model work runs is an
engine (`arborl.train.engine`), composed in, never a subclass: `LocalEngine` in this
process, or `RayEngine` over Ray workers and an FSDP2 train group.

`fit` runs the SFT warm start (unless resuming), a held-out evaluation, the RL steps with
periodic evaluations and checkpoints, a final evaluation, plots and `summary.json`.
Every random draw flows from `trainer.seed` and the step number, or from generators kept
in the checkpoint, so a resumed run replays the remaining steps exactly.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from arborl.config import ConfigError, to_dict
from arborl.data import write_trajectories
from arborl.data.tasks import read_task_seeds, sample_task_seeds
from arborl.rewards import build_reward_fns
from arborl.rollout import draw_seeds
from arborl.train.advantages import (
    get_algorithm,
    informative_groups,
)
from arborl.train.build import build_kl_controller
from arborl.train.checkpoint import load_state, resolve_resume, write_checkpoint
from arborl.train.config import TrainConfig
from arborl.train.correction import correct_rows, resolve_correction
from arborl.train.diagnostics import (
    group_diagnostics,
)
from arborl.train.distill import TEACHER_KEYS, Distillation
from arborl.train.engine import (
    ACTOR_KEYS,
    CRITIC_KEYS,
    Engine,
    RolloutPlan,
    check_engine,
    choice_keys,
    resolve_engine,
)
from arborl.train.evaluate import paired_gain, record_evaluation
from arborl.train.failures import FailureTally, first_reason, signal_rows
from arborl.train.refill import refill_groups, trainer_draw
from arborl.train.rows import attach_advantages, batch_rewards, drop_env_errors
from arborl.train.runlog import MetricsLogger, PhaseTimer, RunDir
from arborl.train.stop import StopSignals, TrainingStopped
from arborl.train.update import minibatch_schedule

log = logging.getLogger("arborl")


class TrainingAborted(RuntimeError):
    """Too many non-finite updates in a row of the run (see trainer.max_bad_steps)."""


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A seed for (run seed, step, purpose) that does not collide across steps."""
    return int(np.random.default_rng([seed, step, salt]).integers(0, 2**31 - 1))


class RLTrainer:
    """The RL loop over an `Engine` chosen by `trainer.engine` (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, engine: Engine | None = None) -> None:
        """`engine`: an engine instance to drive (built by the caller, e.g. a test or a
        custom set-up); None builds `trainer.engine` from `ENGINES`."""
        self.cfg = cfg
        engine_cls = type(engine) if engine is not None else resolve_engine(cfg.trainer.engine)
        check_engine(engine_cls)
        if cfg.trainer.resume is not None and not cfg.trainer.name:
            raise ConfigError(
                f"trainer.resume={cfg.trainer.resume} needs the run's name, else a new "
                "timestamped run starts from scratch; name the run folder under "
                f"trainer.output_dir={cfg.trainer.output_dir}: trainer.name=<folder>"
            )
        engine_cls.check_config(cfg)  # an engine's own settings fail before any work
        # algo.correction.mode "auto" -> a mode, by the engine's sampler (logged, and saved)
        cfg, self.correction = resolve_correction(cfg, engine_cls)
        self.cfg = cfg
        self.run = RunDir.create(cfg.trainer.output_dir, cfg.trainer.name, cfg)
        self.reward_fns = build_reward_fns(cfg.reward)  # loads reward.rm_model for `rm`
        self.engine: Engine = engine if engine is not None else engine_cls(cfg, self.run.path)
        self.algorithm = get_algorithm(cfg.algo.name)
        self.distill = Distillation(cfg.teacher) if cfg.teacher.enabled else None
        """Learning from a teacher (`arborl.train.distill`), None without `teacher.kind`."""
        self.kl_ctl = build_kl_controller(cfg)
        self.gen = torch.Generator().manual_seed(cfg.trainer.seed)
        self.task_seeds = (  # a task file replaces random seeds (checked here, before work)
            read_task_seeds(cfg.env.tasks_file, cfg.env.id, cfg.env.train_split)
            if cfg.env.tasks_file
            else None
        )
        self.step = 0
        self.env_steps = 0
        self.bad_steps = 0
        self.env_errors = 0
        """Episodes ended by env errors so far (bounded by env.max_env_errors)."""
        self.tally = FailureTally()
        """Errored episodes per phase and rows trained (`summary.json["failures"]`)."""
        self.saved_step: int | None = None
        """The step of the newest checkpoint this run wrote or resumed from."""
        self.history: dict[str, list] = {"train": [], "eval": []}
        self.last_outcomes: dict[int, float] = {}
        """Task seed -> 1.0 won / 0.0 lost of the newest evaluation."""
        self.callbacks: list[Callable[[RLTrainer], None]] = []
        """Called as fn(trainer) at the end of every RL step (e.g. to inject faults)."""
        self.stop = StopSignals(lambda: f"steps {(self.saved_step or 0) + 1}-{self.step + 1} lost")

    # --- one step -----------------------------------------------------------------------
    def plan(self, step: int, draw: int = 0) -> RolloutPlan:
        """The tasks and the seeded rollout config of RL step `step` (a pure function of
        the run seed, the step and the refill `draw`, so a resumed run draws the same)."""
        c = self.cfg
        salt = 1 if draw == 0 else 100 + 2 * draw  # draw 0 keeps the seeds it always had
        task_seed = step_seed(c.trainer.seed, step, salt)
        if self.task_seeds is None:
            seeds = draw_seeds(c.rollout.num_tasks, task_seed)
        else:
            seeds = sample_task_seeds(self.task_seeds, c.rollout.num_tasks, task_seed)
        rollout = replace(c.rollout, seed=step_seed(c.trainer.seed, step, salt + 1))
        return RolloutPlan(step, seeds, rollout)

    def rl_step(self) -> dict[str, float]:
        """One rollout batch and its update; returns the step's metrics."""
        c, a = self.cfg, self.cfg.algo
        timer = PhaseTimer()
        plan = self.plan(self.step)
        # the next step's plan, for engines that roll out one step ahead (ray.one_step_off)
        upcoming = self.plan(self.step + 1) if self.step + 1 < c.trainer.total_steps else None
        with timer.phase("rollout"):
            out = self.engine.rollout(plan, upcoming)
        self.env_steps += len(out.batch)
        batch, trajectories, _, errors = drop_env_errors(out.batch, out.trajectories)
        self._count_env_errors(errors)
        temperature = plan.rollout.temperature
        batch, train, metrics = self._advantages(batch, trajectories, temperature, timer)
        if self.distill is not None and len(batch):  # the teacher's labelled rows join
            train, teacher_metrics = self.distill.rows(batch, train, self.step, a.drop_zero_adv)
            metrics.update(teacher_metrics)
        # with the episodes whose reward a source made non-finite (`_advantages`)
        metrics["rollout/env_errors"] = float(len(errors) + metrics.get("rollout/env_errors", 0))
        n_err, why = int(metrics["rollout/env_errors"]), first_reason(out.trajectories)
        self.tally.add("rl", len(out.trajectories), n_err, why)
        self.tally.trained(signal_rows(train))
        if len(train) and self.correction.recompute:  # algo.correction: the trainer's old_logp
            with timer.phase("old_logp"):
                trainer_logp = self.engine.policy_logp(train, temperature)
                train, corrected = correct_rows(train, trainer_logp, self.correction)
            metrics.update(corrected)
        with timer.phase("update"):
            if len(train):
                keys = ACTOR_KEYS + choice_keys(train)
                keys += tuple(k for k in TEACHER_KEYS if k in train)
                keys += tuple(k for k in ("ref_logp", "is_weight") if k in train)
                actor_mbs = minibatch_schedule(train.select(*keys), a, self.gen)
                critic_mbs = (
                    minibatch_schedule(batch.select(*CRITIC_KEYS), a, self.gen)
                    if self.algorithm.needs_critic
                    else None
                )
                up = self.engine.update(actor_mbs, critic_mbs, temperature, self.kl_ctl.value)
                metrics.update(up.stats)
                self._count_bad(up.skipped)
            lr = self.engine.scheduler_step()
            if "actor/kl" in metrics:
                self.kl_ctl.update(metrics["actor/kl"], len(batch))
        with timer.phase("weight_sync"):
            metrics.update(self.engine.sync_weights())
        metrics.update(self._step_metrics(out.stats, lr))
        metrics.update(out.metrics)
        # weight versions the sampler was behind (an async engine reports it; else 0)
        metrics.setdefault("async/staleness", 0.0)
        if c.trainer.save_trajectories:
            write_trajectories(
                self.run.path / "trajectories" / f"step-{self.step:05d}.jsonl",
                out.trajectories[: c.trainer.save_trajectories],
            )
        metrics.update(timer.metrics())  # callbacks (fault injection, tests) are not the step's
        for fn in self.callbacks:
            fn(self)
        return metrics

    def _advantages(self, batch, trajectories, temperature: float, timer: PhaseTimer):
        """Rewards, reference log-probs, values and advantages of the step's rows, each
        phase timed: the rows kept (`algo.filter_groups`), those to train on, and the
        metrics (nothing to score when every episode failed)."""
        c = self.cfg
        if not len(batch):
            return batch, batch, {"train/rows_with_signal": 0.0}
        with timer.phase("rewards"):
            rewards, metrics = batch_rewards(
                batch, len(trajectories), c.reward.sources, trajectories, self.reward_fns
            )
            batch, trajectories, rewards, errors = drop_env_errors(batch, trajectories, rewards)
        self._count_env_errors(errors)
        metrics["rollout/env_errors"] = float(len(errors))
        if not len(batch):
            return batch, batch, {**metrics, "train/rows_with_signal": 0.0}
        diag = group_diagnostics(batch)  # of the whole rollout, before any filter
        if c.algo.filter_groups:  # DAPO-style: all-equal groups carry no group signal
            keep, filtered = informative_groups(batch, rewards)
            metrics["rollout/groups_filtered"] = filtered
            batch, rewards = batch[keep], rewards[keep]
            n, most = c.rollout.num_tasks, c.algo.max_gen_batches  # refill: arborl.train.refill
            batch, rewards, more = refill_groups(batch, rewards, trainer_draw(self, timer), n, most)
            metrics.update(more)
            if not len(batch):
                return batch, batch, {**metrics, **diag, "train/rows_with_signal": 0.0}
        values = None
        if c.algo.kl_coef > 0 or self.algorithm.needs_reference:
            with timer.phase("ref_logp"):
                batch["ref_logp"] = self.engine.reference_logp(batch, temperature)
        if self.algorithm.needs_critic:
            with timer.phase("values"):
                values = self.engine.values(batch)
        with timer.phase("advantages"):
            train, adv_metrics = attach_advantages(batch, rewards, c.algo, values)
        return batch, train, {**metrics, **adv_metrics, **diag}

    def _count_env_errors(self, errors: list[str]) -> None:
        """Count the step's env errors (`drop_env_errors`' lines) against the budget."""
        if not errors:
            return
        self.env_errors += len(errors)
        budget = self.cfg.env.max_env_errors
        log.warning(
            "step %d: %d episode(s) ended by an env error, left out of the update "
            "(%d of env.max_env_errors=%d in this run): %s",
            self.step + 1, len(errors), self.env_errors, budget, "; ".join(errors[:5]),
        )  # fmt: skip
        if self.env_errors > budget:
            raise TrainingAborted(
                f"{self.env_errors} episodes ended by env errors (crashed or timed-out env "
                "workers, or non-finite rewards), more than env.max_env_errors="
                f"{budget}; the run stops at RL step {self.step + 1} of env {self.cfg.env.id} "
                f"(this step: {'; '.join(errors[:3])}). Check the env (or its servers' logs) "
                "and its rewards, raise env.timeout_s for slow envs, or raise "
                "env.max_env_errors if failures are expected"
            )

    def _step_metrics(self, s: dict, lr: float) -> dict:
        """The per-step metrics every engine logs (`s`: the rollout's episode stats)."""
        return {
            "train/success": s["success"],
            "train/mean_return": s["mean_return"],
            "train/mean_turns": s["mean_turns"],
            "train/invalid_rate": s["invalid_action_rate"],
            "train/env_steps": float(self.env_steps),
            "actor/lr": lr,
            "actor/kl_coef": self.kl_ctl.value,
            # tree rollouts (rollout.mode=tree) report no generation throughput
            **({"rollout/tokens_per_s": s["tokens_per_s"]} if "tokens_per_s" in s else {}),
        }

    def _count_bad(self, skipped: int) -> None:
        if skipped:
            self.bad_steps += skipped
            log.warning(
                "step %d: %d update(s) skipped for non-finite loss/grad", self.step, skipped
            )
            if self.bad_steps >= self.cfg.trainer.max_bad_steps:
                raise TrainingAborted(
                    f"{self.bad_steps} updates had a NaN/inf loss or gradient "
                    f"(trainer.max_bad_steps={self.cfg.trainer.max_bad_steps}); lower algo.lr "
                    "or check the rewards"
                )

    def evaluate(self, num_episodes: int | None = None, phase: str = "eval") -> dict[str, float]:
        """Held-out metrics; the engine's sampled episodes go to `eval_episodes/`, the
        per-task outcomes to `last_outcomes` (for the paired before/after gain) and its
        errored episodes to the run's tally under `phase` ("before", "eval", "after")."""
        result = self.engine.evaluate(num_episodes)
        self.tally.add(phase, result.episodes, result.env_errors, result.first_error)
        ev, self.last_outcomes = record_evaluation(self.run.path, self.step, result)
        return ev

    def _evaluation_record(self, num_episodes: int | None = None, phase: str = "eval") -> dict:
        """`evaluate`, its success added to the run's evaluation history at this step."""
        ev = self.evaluate(num_episodes, phase)
        self.history["eval"].append((self.step, ev["success"]))
        return ev

    def write_report(self, baselines: bool = True) -> None:
        """(Re)write `report.html` from what the run dir holds now (`trainer.report`);
        `baselines`: compute the random/oracle lines if not cached yet."""
        if self.cfg.trainer.report:
            from arborl.report import write_report

            write_report([self.run.path], baselines=baselines)

    # --- checkpoints --------------------------------------------------------------------
    def save(self) -> Path:
        """`checkpoints/step-N/`: the engine's parts and `trainer_state.pt`, atomically."""
        state = {
            "engine": self.engine.name,
            "generator": self.gen.get_state(),
            "env_steps": self.env_steps,
            "bad_steps": self.bad_steps,
            "env_errors": self.env_errors,
            "failures": self.tally.state(),
            "kl_coef": self.kl_ctl.value,
            "history": self.history,
        }
        path = write_checkpoint(
            self.run.path, self.step, self.engine.save, state, self.cfg.trainer.keep_checkpoints
        )
        self.saved_step = self.step
        return path

    def load(self, ckpt: Path) -> None:
        st = load_state(ckpt)
        written_by = st.get("engine", st.get("backend", "local"))  # "backend": before 2026-12
        if written_by != self.engine.name:
            raise RuntimeError(
                f"{ckpt} was written by trainer.engine={written_by}; resume it with that "
                f"engine, or start trainer.engine={self.engine.name} from its policy: "
                f"model.name_or_path={ckpt}/policy sft.enabled=false"
            )
        self.engine.load(Path(ckpt), st)
        self.gen.set_state(st["generator"])
        self.step, self.env_steps, self.bad_steps = st["step"], st["env_steps"], st["bad_steps"]
        self.env_errors = st.get("env_errors", 0)
        self.tally = FailureTally.from_state(st.get("failures"))
        self.kl_ctl.value = st["kl_coef"]
        self.history = st["history"]
        self.saved_step = self.step
        self.engine.sync_weights()

    def _stop_if_asked(self) -> None:
        """After a SIGTERM/SIGINT (`self.stop`), between steps: checkpoint this step (if
        not saved yet), say so in run.log and raise `TrainingStopped`."""
        if self.stop.signum is None:
            return
        if self.saved_step != self.step:
            self.save()
        stopped = TrainingStopped(self.stop.signum, self.step)
        log.warning("%s", stopped)
        raise stopped

    # --- the run ------------------------------------------------------------------------
    def fit(self) -> dict:
        c = self.cfg
        logger = MetricsLogger(
            self.run,
            total=c.trainer.total_steps,
            desc="RL",
            keys=("train/success", "eval/success", "actor/pg_loss"),
            disable_bar=not c.trainer.progress,
            loggers=c.trainer.loggers,
            config=to_dict(c),
        )
        try:
            with self.stop:  # SIGTERM/SIGINT: finish the step, save, stop (train/stop.py)
                return self._fit(logger)
        except Exception:
            self.write_report(baselines=False)  # a crashed run shows what it has, at once
            raise
        finally:
            logger.close()
            self.engine.close()
            self.run.close()

    def _fit(self, logger: MetricsLogger) -> dict:
        c = self.cfg
        t_start = time.perf_counter()
        ckpt = resolve_resume(c.trainer.resume, self.run.path)
        sft = self.engine.prepare(warm_start=ckpt is None and c.sft.enabled and c.sft.steps > 0)
        self.stop.arm()  # an engine's start-up (ray.init) may have set handlers of its own
        if sft is not None:
            logger.log(0, {"phase": "sft", **{k: v for k, v in sft.items() if k != "sft/demos"}})
        if ckpt is not None:
            self.load(ckpt)
            log.info("resumed from %s at step %d", ckpt, self.step)
            logger.rewind(self.step)
            logger.bar.update(self.step)
        else:
            before = self._evaluation_record(phase="before")
            logger.log(0, {f"eval/{k}": v for k, v in before.items()})
            self.history["before"] = before
            self.history["before_outcomes"] = self.last_outcomes
            log.info("before RL: success %.3f [%.3f, %.3f]",
                     before["success"], before["success_lo"], before["success_hi"])  # fmt: skip
            self.write_report()
        while self.step < c.trainer.total_steps:
            self._stop_if_asked()
            if c.trainer.max_env_steps and self.env_steps >= c.trainer.max_env_steps:
                break
            metrics = self.rl_step()
            self.step += 1
            self.history["train"].append((self.step, metrics["train/success"]))
            if c.eval.every and self.step % c.eval.every == 0 and self.step < c.trainer.total_steps:
                ev = self._evaluation_record(c.eval.every_episodes)
                metrics.update({f"eval/{k}": v for k, v in ev.items()})
            logger.log(self.step, metrics, advance=1)
            if "eval/success" in metrics:
                self.write_report()
            if c.trainer.save_every and self.step % c.trainer.save_every == 0:
                self.save()
        if self.saved_step != self.step:  # the final step is saved once
            self.save()
        self._stop_if_asked()  # before the final evaluation
        after = self.history["after"] = self._evaluation_record(phase="after")
        logger.log(self.step, {f"eval/final_{k}": v for k, v in after.items()})
        summary = {
            "before": self.history.get("before"),
            "after": after,
            # after - before on the same tasks and sampling seed, with a paired interval
            "gain": paired_gain(self.history.get("before_outcomes", {}), self.last_outcomes),
            "steps": self.step,
            "env_steps": self.env_steps,
            "wall_s": round(time.perf_counter() - t_start, 1),
            "run_dir": str(self.run.path),
            "failures": self.tally.report(self.step),  # also to run.log, while it is open
            # what decides float rounding, hence the numbers (docs/training.md, Reproducibility)
            "kernels": {
                "torch": torch.__version__,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "num_threads": torch.get_num_threads(),
            },
        }
        (self.run.path / "summary.json").write_text(json.dumps(summary, indent=2))
        if c.trainer.plots:
            from arborl.train.plots import plot_learning_curves

            plot_learning_curves(self.run.path, self.history)
        self.write_report()
        return summary
