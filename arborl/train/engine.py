"""Engines: where the model work of the one RL loop (`arborl.train.rl.RLTrainer`) runs.

The trainer owns everything that decides *what* is trained (step seeds, rewards,
advantages, the minibatch order, KL control, the bad-step guard, metrics, evaluation
cadence, the atomic checkpoint writer); an engine owns the models and does the work it is
asked for, behind the small `Engine` protocol below. `trainer.engine` picks one from
`ENGINES` (a registered name, an `arborl.engines` entry point or `pkg.module:Class`), or
`RLTrainer(cfg, engine=...)` takes an instance:

  local  `LocalEngine` (this file): one process, the policy and its generation backend
         share weights, so weight sync is a no-op.
  vllm   `arborl.train.vllm_engine:VLLMEngine`: a `LocalEngine` whose rollouts and
         evaluations generate on an in-process vLLM.
  ray    `arborl.distributed.engine:RayEngine`: a driver over Ray rollout workers and an
         FSDP2 train group, settings in the `ray` section (registered as a lazy entry
         point, so `arborl.train` never imports `arborl.distributed`).

Three things are called "engine"-like and are kept apart by name: the *engine* (this
protocol, `trainer.engine`), the *generation backend* an engine samples with
(`arborl.generation`, e.g. `HFBackend`), and the *rollout loop* that drives envs with it
(`arborl.rollout.loop`). A new engine is a class implementing `Engine`, reachable without
an edit to arborl: `ENGINES.register("name", "pkg.module:Class")`, an entry point in the
`arborl.engines` group, or `trainer.engine=pkg.module:Class`; its own settings come in
`trainer.engine_options` (checked by its `check_config`). `tests/train/test_engine_contract.py`
drives the loop through steps, a save and a resume with a small engine written there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from arborl.config import ConfigError
from arborl.data import Batch
from arborl.generation.hf import HFBackend
from arborl.models import ValueModel
from arborl.registry import Registry, UnknownNameError
from arborl.rollout import CHOICE_KEYS, RolloutConfig
from arborl.rollout.batching import holds_choices
from arborl.train import build, sft
from arborl.train.config import TrainConfig
from arborl.train.distill import TeacherRollout
from arborl.train.evaluate import EvalResult, evaluate_policy
from arborl.train.memory import resolve_micro_batch_tokens
from arborl.train.rollout_modes import RunServices, rollout_step
from arborl.train.update import UpdateResult, actor_update, critic_fit, critic_values, score_rows


@dataclass
class RolloutPlan:
    """What one RL step rolls out: the task seeds and the step's (seeded) rollout config."""

    step: int
    seeds: list[int]
    rollout: RolloutConfig


@dataclass
class RolloutOutput:
    """A step's rollout: the step-view Batch, its trajectories and the episode stats."""

    batch: Batch
    trajectories: list
    stats: dict[str, float]
    metrics: dict[str, float] = field(default_factory=dict)
    """Engine-specific per-step metrics (e.g. worker restarts), logged as they are."""


class Engine(Protocol):
    """The model work of an RL run. Every method is called by `RLTrainer` only."""

    name: str
    """The `trainer.engine` value; stored in checkpoints and checked on resume."""

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """Raise `ConfigError` for settings this engine cannot run (its own section
        included), before the trainer builds anything."""
        ...

    def prepare(self, warm_start: bool) -> dict[str, float] | None:
        """Make the engine ready to roll out; with `warm_start`, SFT the policy first (the
        KL reference is then the SFT policy). Returns the SFT stats (None without)."""
        ...

    def rollout(self, plan: RolloutPlan, upcoming: RolloutPlan | None = None) -> RolloutOutput:
        """Roll out `plan` with the current weights. `upcoming` is the next step's plan,
        which an asynchronous engine may launch now (`ray.one_step_off`)."""
        ...

    def reference_logp(self, batch: Batch, temperature: float) -> torch.Tensor:
        """(R, A) log-probs of every row's response under the frozen reference."""
        ...

    def values(self, batch: Batch) -> torch.Tensor:
        """(R,) critic value of every row's state."""
        ...

    def update(
        self,
        actor_minibatches: list[Batch],
        critic_minibatches: list[Batch] | None,
        temperature: float,
        kl_coef: float,
    ) -> UpdateResult:
        """One optimizer step per minibatch, in the given order (actor, then critic)."""
        ...

    def scheduler_step(self) -> float:
        """Advance the LR schedule one RL step; the new policy LR."""
        ...

    def sync_weights(self) -> dict[str, float]:
        """Make the rollout side use the updated weights; metrics of the sync."""
        ...

    def evaluate(self, num_episodes: int | None = None) -> EvalResult:
        """Held-out episodes (`arborl.train.evaluate.summarize_eval`: the metrics, the
        outcomes, and a `sample` of up to `eval.save_episodes` trajectories for the report)."""
        ...

    def save(self, directory: Path) -> dict[str, Any]:
        """Write this engine's part of a checkpoint into `directory` (a temporary folder
        the trainer renames into place); returns state for `trainer_state.pt`."""
        ...

    def load(self, directory: Path, state: dict[str, Any]) -> None:
        """Restore what `save` wrote (and the state it returned)."""
        ...

    def close(self) -> None:
        """Release pools, services (the program mode's gateway), workers and processes."""
        ...


ENGINES: Registry[type] = Registry(
    "trainer.engine", allow_entry_points=True, entry_point_group="arborl.engines"
)
"""`trainer.engine` -> engine class, built as `cls(cfg, run_dir)`."""


ENGINE_METHODS = (
    "check_config", "prepare", "rollout", "reference_logp", "values", "update",
    "scheduler_step", "sync_weights", "evaluate", "save", "load", "close",
)  # fmt: skip
"""Everything `RLTrainer` calls on an engine (the `Engine` protocol's methods)."""

ACTOR_KEYS = ("input_ids", "attention_mask", "response_mask", "old_logp", "adv", "weight")
CRITIC_KEYS = ("input_ids", "attention_mask", "response_mask", "returns", "old_values")
SCORE_KEYS = ("input_ids", "attention_mask", "response_mask")
"""The Batch columns each kind of model work reads (what an engine may ship to workers)."""


def choice_keys(batch: Batch) -> tuple[str, ...]:
    """The score-mode columns of `batch` (`CHOICE_KEYS`, none for generated rows): the
    actor update and the reference read them beside `ACTOR_KEYS` / `SCORE_KEYS`."""
    return CHOICE_KEYS if holds_choices(batch) else ()


def resolve_engine(name: str) -> type:
    """The engine class `trainer.engine` names (registered, entry point or module:attr)."""
    try:
        return ENGINES.get(name)
    except (UnknownNameError, ImportError, AttributeError, ValueError) as e:
        raise ConfigError(str(e)) from None  # a config error, reported before any work


def check_engine(engine_cls: type) -> None:
    """Raise `TypeError` naming what an engine class lacks of the `Engine` protocol."""
    missing = [m for m in ENGINE_METHODS if not callable(getattr(engine_cls, m, None))]
    if not isinstance(getattr(engine_cls, "name", None), str):
        missing.insert(0, "name (a str attribute)")
    if missing:
        raise TypeError(
            f"engine {engine_cls.__module__}.{engine_cls.__qualname__} does not implement "
            f"the Engine protocol (arborl.train.engine.Engine): missing {', '.join(missing)}"
        )


def check_no_engine_options(cfg: TrainConfig) -> None:
    """The built-in engines read their own sections; `trainer.engine_options` is for a
    plug-in engine and would be silently ignored by them."""
    if cfg.trainer.engine_options:
        raise ConfigError(
            f"trainer.engine_options={cfg.trainer.engine_options} is read by plug-in engines "
            f"only; trainer.engine={cfg.trainer.engine!r} ignores it: remove it (the Ray "
            "engine's settings are the `ray` section)"
        )


@ENGINES.register("local")
class LocalEngine:
    """Everything in this process: policy + LoRA, HF generation backend, critic,
    reference, optimizers, the run's env pools in `env.pool_mode` (`pools`: training,
    demo and evaluation envs over one set of worker processes) and its rollout mode's
    services (`services`: the program mode's one gateway, serving the live model), both
    kept for the run and closed by `close`."""

    name = "local"

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        check_no_engine_options(cfg)

    @classmethod
    def sampler_mismatch(cls, cfg: TrainConfig) -> str | None:
        """Why rollouts can come from another policy than the trainer's (None: the HF
        backend samples with the trained model itself, in the same dtype, at the same
        version), for `algo.correction.mode=auto` (`arborl.train.correction`)."""
        return None

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None) -> None:
        self.cfg = cfg
        build.set_threads(cfg)
        self.model, self.tokenizer = build.build_policy(cfg)
        self.backend = HFBackend(self.model, self.tokenizer, max_batch_size=128)
        self.critic = build.build_critic(cfg)
        self.critic_opt = build.build_critic_optimizer(cfg, self.critic)
        self.ref = build.build_reference(cfg, self.model)  # re-synced after a warm start
        self.opt, self.sched = build.build_optimizer(cfg, self.model)
        self.pools = build.build_pool_set(cfg)  # the run's envs and workers, until `close`
        self.services = RunServices()  # started on first use, until `close`
        self.teacher = TeacherRollout(cfg) if cfg.teacher.enabled else None
        """Labels and mixes each step's episodes (`arborl.train.distill`); None: off."""
        try:
            self.pool = build.build_train_pool(cfg, pools=self.pools)
            # `algo.*` with the update's micro-batch token budget resolved, once the run's
            # other parts hold their memory (`arborl.train.memory`)
            ctx = build.compute_dtype(cfg, self.model)
            tokens = resolve_micro_batch_tokens(self.model, cfg.algo.micro_batch_tokens, 1, ctx)
            self.algo = replace(cfg.algo, micro_batch_tokens=tokens)
        except BaseException:
            self.pools.close()
            raise

    def prepare(self, warm_start: bool) -> dict[str, float] | None:
        if not warm_start:
            return None
        with build.compute_dtype(self.cfg, self.model):
            stats = sft.warm_start(self.model, self.tokenizer, self.cfg, pools=self.pools)
        if self.ref is not None:  # KL is measured against the policy RL starts from
            self.ref.load_state_dict(self.model.state_dict())
        return stats

    def rollout(self, plan: RolloutPlan, upcoming: RolloutPlan | None = None) -> RolloutOutput:
        c = self.cfg
        backend = self.generation_backend()
        metrics: dict[str, float] = {}
        with build.compute_dtype(c, self.model):
            if self.teacher is not None:  # learn from a teacher: labelled, mixed episodes
                res, metrics = self.teacher.rollout(backend, self.tokenizer, self.pool, plan)
            else:
                res = rollout_step(
                    backend, self.tokenizer, self.pool, seeds=plan.seeds, rollout_cfg=plan.rollout,
                    cfg=c, split=c.env.train_split, services=self.services,
                )  # fmt: skip
        return RolloutOutput(res.batch, res.trajectories, res.stats, metrics)

    def reference_logp(self, batch: Batch, temperature: float) -> torch.Tensor:
        with build.compute_dtype(self.cfg, self.ref):
            return score_rows(self.ref, batch, temperature, self.algo.micro_batch_tokens)

    @torch.no_grad()
    def policy_logp(self, batch: Batch, temperature: float) -> torch.Tensor:
        """(R, A) log-probs of every row's response under the policy's current weights (the
        trainer's `old_logp` of a rollout correction, `arborl.train.correction`)."""
        self.model.eval()
        with build.compute_dtype(self.cfg, self.model):
            return score_rows(self.model, batch, temperature, self.algo.micro_batch_tokens)

    @torch.no_grad()
    def values(self, batch: Batch) -> torch.Tensor:
        with build.compute_dtype(self.cfg, self.critic):
            return critic_values(self.critic, batch, self.algo.micro_batch_tokens)

    def update(self, actor_minibatches, critic_minibatches, temperature, kl_coef) -> UpdateResult:
        self.model.train()
        a = self.algo
        template = actor_minibatches[0][:1]
        with build.compute_dtype(self.cfg, self.model):
            up = actor_update(
                self.model, self.opt, actor_minibatches, template, a, temperature, kl_coef
            )
            if critic_minibatches:
                cup = critic_fit(
                    self.critic, self.critic_opt, critic_minibatches, critic_minibatches[0][:1], a
                )
                up = UpdateResult({**up.stats, **cup.stats}, up.skipped + cup.skipped)
        return up

    def scheduler_step(self) -> float:
        return build.scheduler_step(self.sched)

    def sync_weights(self) -> dict[str, float]:
        return {}  # the generation backend holds the trained model itself

    def evaluate(self, num_episodes: int | None = None) -> EvalResult:
        backend = self.generation_backend()
        with build.compute_dtype(self.cfg, self.model):
            return evaluate_policy(backend, self.tokenizer, self.cfg, num_episodes,
                                   pools=self.pools, services=self.services)  # fmt: skip

    def generation_backend(self):
        """The generation backend rollouts and evaluations sample with, ready for a new
        batch of calls (here the HF backend over the trained model itself)."""
        self.model.eval()
        self.backend.forget_prompts()  # a step's numbers depend on that step's calls only
        return self.backend

    def save(self, directory: Path) -> dict[str, Any]:
        from arborl.agent.settings import save_agent_settings
        from arborl.train.checkpoint import save_model_parts

        policy_dir = save_model_parts(directory, self.model, self.tokenizer, self.critic)
        save_agent_settings(policy_dir, self.cfg.agent)
        state = {
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "generation_backend": self.backend.state_dict(),
        }
        if self.critic is not None:
            state["critic_optimizer"] = self.critic_opt.state_dict()
        if self.ref is not None:  # after a warm start it is not the spec's initial weights
            state["reference"] = self.ref.state_dict()
        return state

    def load(self, directory: Path, state: dict[str, Any]) -> None:
        from safetensors.torch import load_file

        if hasattr(self.model, "merge_and_unload"):  # LoRA: base as built, adapters saved
            self._load_adapters(directory)
        else:
            weights = load_file(directory / "policy" / "model.safetensors")
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
            if unexpected or [k for k in missing if "lm_head" not in k]:
                raise RuntimeError(
                    f"checkpoint {directory} does not match the model: {missing} {unexpected}"
                )
            if self.model.config.tie_word_embeddings:
                self.model.tie_weights()
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        if self.ref is not None and "reference" in state:
            self.ref.load_state_dict(state["reference"])
        torch.set_rng_state(state["torch_rng"])
        self.backend.load_state_dict(state["generation_backend"])
        if self.critic is not None:
            critic = ValueModel.from_pretrained(directory / "critic")
            self.critic.load_state_dict(critic.state_dict())
            self.critic_opt.load_state_dict(state["critic_optimizer"])

    def _load_adapters(self, directory: Path) -> None:
        """The LoRA adapters of a checkpoint into the freshly built peft model (its base
        weights are `model.name_or_path`'s, which LoRA never changes)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        from arborl.train.checkpoint import ADAPTER_DIR

        path = directory / ADAPTER_DIR / "adapter_model.safetensors"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: {directory} was not written by a LoRA run; resume it "
                "with the model.lora_rank it was trained with"
            )
        result = set_peft_model_state_dict(self.model, load_file(path))
        if result.unexpected_keys:
            raise RuntimeError(
                f"checkpoint {directory} adapters do not match model.lora_rank="
                f"{self.cfg.model.lora_rank}: unexpected {result.unexpected_keys[:4]}"
            )

    def close(self) -> None:
        try:
            self.services.close()  # the gateway first: no episode is left talking to it
        finally:
            self.pools.close()  # every pool of the run, then its worker processes


ENGINES.register("ray", "arborl.distributed.engine:RayEngine")  # imported only when asked
ENGINES.register("vllm", "arborl.train.vllm_engine:VLLMEngine")  # needs the vLLM venv
