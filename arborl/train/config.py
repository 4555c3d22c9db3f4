"""The `arborl train` configuration: one dataclass per component, checked at start-up.

`load_train_config(overrides)` layers the dataclass defaults, `configs/train.yaml`-style
files, group selections (`algo=grpo` -> the `grpo` algorithm record's defaults,
`arborl.train.advantages`; `env=sokoban` -> `configs/env/sokoban.yaml` or a package's
`arborl.env_configs` entry point, `arborl.train.env_configs`) and dotted overrides
(`trainer.total_steps=10`). The defaults are the demo: a tiny model, an SFT warm start on
oracle Maze demos (`env=maze` applies unless the run chooses its env), then GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from arborl.agent.config import AgentConfig
from arborl.config import ConfigError, load_config
from arborl.rollout.agent_config import AgentProgramConfig
from arborl.rollout.config import RolloutConfig
from arborl.search.config import SearchConfig
from arborl.train.correction_config import CorrectionConfig
from arborl.train.ray_config import RayConfig
from arborl.train.teacher import TeacherConfig, check_teacher

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
"""Where group YAML files live in a source checkout (`configs/env/*.yaml`, ...)."""


@dataclass
class ModelConfig:
    """The policy (and critic) model."""

    name_or_path: str = "tiny-1m"
    """A tiny preset (char tokenizer: tiny-0.1m, tiny-1m, qwen-tiny-1m, tiny-20m; GPT-2's
    byte-level BPE + ChatML: bpe-tiny-0.1m, bpe-tiny-1m; a BPE learned from the env
    packages' text, prompts of tens of tokens: envbpe-tiny-0.1m, envbpe-tiny-1m), a
    pretrained name (smollm2-135m-instruct) or a local HF checkpoint dir."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Compute dtype. "bfloat16" is mixed precision: weights, gradients and optimizer states
    stay float32, and every forward and backward (generation, scoring, SFT, the RL update)
    runs under `torch.autocast` in bf16 (FSDP2: `MixedPrecisionPolicy`). ~3x faster for
    SmolLM2 on CPUs with AMX; far slower than float32 on CPUs without a bf16 unit. "auto"
    (the default) resolves at config load to bf16 only where the CPU has AMX-BF16 or
    AVX512-BF16, the model's hidden size is >= 512 (the tiny presets stay float32) and a
    GEMM of its shapes is measured >= 1.5x faster in bf16; else float32. The run log says
    what it chose and why, and config.yaml keeps the resolved value (arborl.models.precision)."""
    lora_rank: int = field(default=0, metadata={"min": 0})
    """LoRA rank; 0 trains all weights."""
    lora_alpha: int = field(default=16, metadata={"min": 1})
    """LoRA scaling numerator (the update is scaled by alpha / rank)."""
    seed: int = 0
    """Seed of the initial weights of a preset and of the LoRA adapters (`lora_rank > 0`)."""


@dataclass
class EnvConfig:
    """Which environment the agent trains and is evaluated in."""

    id: str = "arborl/Maze-v0"
    """Registered env id (`arborl env list` shows them)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments (difficulty knobs) passed to `arborl.envs.make`, checked at
    start-up against the env's constructor. A run that chooses no env gets the demo's
    group `env=maze` (`short_actions: true`, one token per move); a run that sets `env.id`
    or `env=NAME` gets only what it or the group sets (`env.kwargs.num_disks=4` adds one)."""
    train_split: Literal["train", "val", "test"] = "train"
    """Split that RL and SFT tasks are drawn from."""
    eval_split: Literal["train", "val", "test"] = "test"
    """Split of the held-out evaluation tasks."""
    tasks_file: str | None = None
    """RL task-prompt parquet (verl-style rows, e.g. `arborl curate`'s `train/rl.parquet`):
    RL draws its tasks from the `extra_info.seed` of this env's rows instead of random
    seeds of `train_split`. None: random seeds."""
    pool_mode: str = field(
        default="inproc",
        metadata={"registry": "arborl.envs.modes:POOL_MODES", "also": ("auto",)},
    )
    """A name of `arborl.envs.modes.POOL_MODES` (or "auto"): where the training envs run (`arborl.envs.make_pool`): in this process, in worker
    processes, in Ray actors, behind HTTP env servers (local ones the pool starts, or
    `env.urls`), or on the OpenEnv servers at `env.urls` ("openenv"); "auto" takes an env
    package's preferred mode (`arborl env add`). Out-of-process envs of a package run in
    its isolated interpreter (`arborl env setup ID` first)."""
    urls: list[str] = field(default_factory=list)
    """Env servers the pool connects to instead of starting its own, e.g.
    `["http://127.0.0.1:8000"]`: required by pool_mode=openenv (`arborl env serve ID
    --protocol openenv`, or any openenv-core server), optional for pool_mode=http
    (`arborl env serve ID`); their bearer token is the ARBORL_TOKEN environment variable.
    Empty: none (the other modes start their envs themselves)."""
    num_workers: int = field(default=0, metadata={"min": 0})
    """Worker processes the run's envs are spread over (pool_mode subprocess; actors per
    pool with ray), each holding several envs: started once per run, all at once, and
    shared by the training, demo and evaluation envs, then stopped at the end of the run
    (or on its error). A crashed or hung worker ends the episodes of its own envs only.
    0: one per CPU core this process may use."""
    timeout_s: float = field(default=30.0, metadata={"min": 0.001})
    """Seconds one call to an out-of-process env (reset, step) may take before it counts
    as an env error (pool modes subprocess, ray, http; in-process calls cannot time out)."""
    max_env_errors: int = field(default=100, metadata={"min": 0})
    """Episodes ended by env errors (crashed or timed-out env workers) that a run
    tolerates: they are left out of the advantage groups and the loss, counted per step
    as `rollout/env_errors`, and past this many the run stops with an error (also each
    pool's limit on failed env calls)."""

    def validate(self, prefix: str = "env") -> None:
        from arborl.envs.registry import unaccepted_kwargs

        bad, accepted = unaccepted_kwargs(self.id, self.kwargs)
        if bad:
            raise ConfigError(
                f"{prefix}.kwargs.{bad[0]}={self.kwargs[bad[0]]!r}: env {self.id!r} does not "
                f"take {', '.join(map(repr, bad))} (its constructor takes {accepted}); remove "
                f"it ({prefix}.kwargs={{}} clears them all) or use env=NAME for a config "
                "group that suits the env (`arborl config docs` lists them)"
            )
        if self.pool_mode == "openenv" and not self.urls:
            raise ConfigError(
                f"{prefix}.pool_mode=openenv drives OpenEnv servers someone runs, but "
                f"{prefix}.urls is empty; set {prefix}.urls=[http://HOST:PORT] (for an arborl "
                "env: `arborl env serve ID --protocol openenv`)"
            )
        if self.urls and self.pool_mode not in ("http", "openenv"):
            raise ConfigError(
                f"{prefix}.urls={self.urls} is only read by pool_mode http or openenv, but "
                f"{prefix}.pool_mode={self.pool_mode!r}; set {prefix}.pool_mode or clear "
                f"{prefix}.urls"
            )


@dataclass
class AlgoConfig:
    """Advantage estimator and PPO-family losses."""

    name: str = field(default="grpo", metadata={"registry": "arborl.train.advantages:ALGORITHMS"})
    """The algorithm (its advantage estimator): ppo (GAE with a critic), a critic-free group
    estimator (grpo, drgrpo, rloo, reinforce_pp, reinforce_pp_baseline), gigpo, or raft
    (supervised updates on each batch's won episodes, the robust baseline); any name
    registered in `arborl.train.advantages.ALGORITHMS` (plug-ins: an `arborl.algorithms`
    entry point, or `pkg.module:record`). `algo=NAME` also applies the algorithm's
    defaults."""
    gamma: float = field(default=1.0, metadata={"min": 0.0, "max": 1.0})
    """Discount over env steps (GAE, GiGPO step returns)."""
    lam: float = field(default=0.95, metadata={"min": 0.0, "max": 1.0})
    """GAE lambda (ppo only)."""
    gigpo_gamma: float = field(default=0.95, metadata={"min": 0.0, "max": 1.0})
    """Discount of GiGPO's step-level returns."""
    gigpo_omega: float = field(default=1.0, metadata={"min": 0.0})
    """Weight of GiGPO's step-level advantage."""
    norm_by_std: bool = True
    """Divide group advantages by the group std (False = Dr.GRPO-style mean-centering)."""
    loss: str = field(
        default="ppo_clip", metadata={"registry": "arborl.algos.policy_loss:POLICY_LOSSES"}
    )
    """The policy loss, a name of `arborl.algos.policy_loss.POLICY_LOSSES`: "ppo_clip" (the
    clipped surrogate, `clip_low`/`clip_high`/`dual_clip`) or "cispo" (REINFORCE with a
    clipped IS weight); plug-ins: an `arborl.policy_losses` entry point or
    `pkg.module:record`. `algo=NAME` applies the algorithm's own loss."""
    loss_options: dict[str, Any] = field(default_factory=dict)
    """Settings of the loss `loss` names, checked at load against the dataclass its record
    declares (`algo.loss=cispo algo.loss_options.clip_high=2.0`); empty: its defaults."""
    clip_low: float = field(default=0.2, metadata={"min": 0.0, "max": 1.0})
    """PPO ratio clip below 1."""
    clip_high: float = field(default=0.28, metadata={"min": 0.0})
    """PPO ratio clip above 1 (clip-higher keeps exploration alive)."""
    dual_clip: float | None = field(default=None, metadata={"min": 1.0})
    """Dual-clip bound c > 1 for negative advantages; None disables."""
    value_clip: float | None = field(default=0.2, metadata={"min": 0.0})
    """Clip range of the critic's value update; None disables."""
    vf_coef: float = field(default=0.5, metadata={"min": 0.0})
    """Weight of the value loss (ppo only)."""
    entropy_coef: float = field(default=0.0, metadata={"min": 0.0})
    """Weight of the entropy bonus."""
    kl_coef: float = field(default=0.0, metadata={"min": 0.0})
    """KL-to-reference coefficient; 0 skips the reference model entirely."""
    kl_estimator: str = field(default="k3", metadata={"registry": "arborl.algos.kl:KL_ESTIMATORS"})
    """KL estimator, a name of `arborl.algos.kl.KL_ESTIMATORS` (k3 = low-variance)."""
    kl_in_reward: bool = False
    """Apply the KL as a reward penalty instead of a loss term."""
    kl_target: float | None = field(default=None, metadata={"min": 0.0})
    """Target KL for the adaptive controller; None keeps kl_coef fixed."""
    loss_agg: str = field(
        default="seq-mean-token-mean", metadata={"registry": "arborl.algos.losses:AGG_MODES"}
    )
    """How per-token losses are reduced to one number, a name of
    `arborl.algos.losses.AGG_MODES` (token-mean, seq-mean-token-sum, seq-mean-token-mean,
    seq-mean-token-sum-norm)."""
    episode_weighting: bool = True
    """Step view: weight each step row by 1 / (its episode's length), so long failed
    episodes do not outweigh short successful ones (sequence-mean over an episode)."""
    ppo_epochs: int = field(default=1, metadata={"min": 1})
    """Passes over each rollout batch."""
    minibatch_size: int = field(default=4096, metadata={"min": 1})
    """Rows per optimizer step. The default takes a whole rollout batch in one step
    (on-policy, ratio 1): on the demo, several noisy minibatch steps per batch did worse."""
    micro_batch_tokens: int | None = field(default=None, metadata={"min": 64})
    """Token budget of one forward/backward (gradients are accumulated over micro-batches).
    None: sized at start from the policy's activation memory a token, measured, and the
    memory free then (at most 16384; the run log says what it chose and why;
    `arborl.train.memory`)."""
    lr: float = field(default=1e-4, metadata={"min": 0.0})
    """Actor learning rate."""
    critic_lr: float = field(default=1e-3, metadata={"min": 0.0})
    """Critic learning rate (ppo only)."""
    weight_decay: float = field(default=0.0, metadata={"min": 0.0})
    """AdamW weight decay."""
    grad_clip: float = field(default=1.0, metadata={"min": 0.0})
    """Max global gradient norm (0 disables)."""
    warmup_steps: int = field(default=2, metadata={"min": 0})
    """Linear LR warm-up, in RL steps."""
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    """LR decay after warm-up."""
    drop_zero_adv: bool = True
    """Skip rows whose advantage is ~0 (no learning signal) in the update."""
    filter_groups: bool = False
    """Drop every task group whose episodes all got the same return before the
    advantages (DAPO's dynamic-sampling filter; their group baseline gives no signal, and
    batch-normalising estimators would give them one): the share dropped is logged as
    `rollout/groups_filtered`."""
    max_gen_batches: int = field(default=1, metadata={"min": 1})
    """With `filter_groups`: rollouts a step may draw to fill `rollout.num_tasks` groups
    with a signal (verl's max_num_gen_batches; `arborl.train.refill`): extra draws of fresh
    tasks until the step is full, cut to num_tasks groups. 1: no refill, the filtered step
    shrinks (logged as rollout/gen_batches, groups_drawn/kept/dropped, train/rows)."""
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    """Rollout correction for a sampler that differs from the trainer (`mismatch/*`
    metrics; docs/training.md, "Off-policy and mismatch")."""

    def validate(self, prefix: str = "algo") -> None:
        if self.max_gen_batches > 1 and not self.filter_groups:
            raise ConfigError(
                f"{prefix}.max_gen_batches={self.max_gen_batches} refills the groups that "
                f"{prefix}.filter_groups drops, but filter_groups is false: set "
                f"{prefix}.filter_groups=true or {prefix}.max_gen_batches=1"
            )
        self.policy_loss(prefix)  # its options section: keys and values

    def policy_loss(self, prefix: str = "algo") -> tuple[Any, Any]:
        """The `PolicyLoss` record of `loss` and its options built from `loss_options`
        (None for a loss that declares none), checked as a section of this config."""
        from arborl.algos.policy_loss import get_policy_loss
        from arborl.config import from_dict

        record = get_policy_loss(self.loss)
        if record.options is None:
            if self.loss_options:
                raise ConfigError(
                    f"{prefix}.loss_options={self.loss_options} but {prefix}.loss="
                    f"{self.loss!r} takes no options; remove them ({prefix}.loss_options={{}})"
                )
            return record, None
        return record, from_dict(record.options, self.loss_options, f"{prefix}.loss_options.")


@dataclass
class RewardConfig:
    """How the training reward is built from several sources."""

    sources: dict[str, float] = field(default_factory=lambda: {"env": 1.0})
    """Reward source name -> weight (env, outcome, format, invalid_action, step, rm, ...)."""
    rm_model: str | None = None
    """Reward model of the `rm` source: a directory written by `arborl rm train`, or the
    URL of an `arborl rm serve` endpoint (http://127.0.0.1:8600). Needed when `rm` is in
    `sources`; see docs/reward_models.md."""
    rm_token: str | None = None
    """Bearer token for an `rm_model` URL (None: the ARBORL_TOKEN environment variable)."""
    rm_batch_size: int = field(default=32, metadata={"min": 1})
    """Episodes per reward-model forward pass (or per server request batch)."""

    def validate(self, prefix: str = "reward") -> None:
        if "rm" in self.sources and not self.rm_model:
            raise ConfigError(
                f"{prefix}.sources has 'rm' but {prefix}.rm_model is not set; give a "
                "directory from `arborl rm train` or an `arborl rm serve` URL"
            )


@dataclass
class SFTConfig:
    """Supervised warm start on oracle demos (or a trajectory file)."""

    enabled: bool = True
    """Run SFT before RL (skipped when resuming from an RL checkpoint)."""
    demos: str | None = None
    """A trajectory file (.jsonl/.parquet); None generates oracle demos of the train split."""
    num_demos: int = field(default=50, metadata={"min": 1})
    """Oracle episodes to generate when `demos` is None."""
    steps: int = field(default=300, metadata={"min": 0})
    """Optimizer steps (stop early: an over-trained policy gives GRPO no mixed groups)."""
    batch_size: int = field(default=64, metadata={"min": 1})
    """(prompt, action) pairs per step."""
    lr: float = field(default=1e-3, metadata={"min": 0.0})
    """Peak learning rate (warm-up then cosine decay)."""
    weight_decay: float = field(default=0.1, metadata={"min": 0.0})
    """AdamW weight decay."""
    warmup_steps: int = field(default=20, metadata={"min": 0})
    """Linear warm-up steps."""
    seed: int = 0
    """Seed of the demo tasks and of the batch order."""


@dataclass
class EvalConfig:
    """Held-out evaluation before and after RL."""

    num_episodes: int = field(default=500, metadata={"min": 1})
    """Held-out tasks evaluated (one sampled episode each)."""
    every: int = field(default=20, metadata={"min": 0})
    """Evaluate every this many RL steps (0: only before and after)."""
    every_episodes: int = field(default=200, metadata={"min": 1})
    """Episodes of the periodic (in-training) evaluations."""
    temperature: float = field(default=1.0, metadata={"min": 0.0})
    """Sampling temperature of evaluation (0 = greedy)."""
    seed: int = 12345
    """Seed that draws the evaluation tasks (the same tasks before and after RL)."""
    save_episodes: int = field(default=16, metadata={"min": 0})
    """Episodes of each evaluation written to `eval_episodes/step-N.jsonl` for the
    report (0: none)."""
    chunk_episodes: int | None = field(default=None, metadata={"min": 1})
    """Episodes an evaluation runs at once (None: all of them). Each running episode has
    its own env, and out of process that is a worker process each (a JVM each for
    TextWorld-Express): a 500-episode evaluation of a packaged env is 500 processes unless
    chunked. Chunks of one evaluation continue its sampling streams, so before and after
    RL stay paired; numbers differ from an unchunked evaluation by sampling, not tasks."""


@dataclass
class TrainerConfig:
    """The run: length, outputs, checkpoints, safety limits."""

    name: str | None = None
    """Run name: outputs go to `output_dir/name` (default: a timestamp)."""
    output_dir: str = "runs"
    """Parent folder of run directories."""
    total_steps: int = field(default=160, metadata={"min": 0})
    """RL steps (one rollout batch + its update each)."""
    max_env_steps: int | None = field(default=None, metadata={"min": 1})
    """Stop once this many env steps were collected (for equal-budget comparisons)."""
    seed: int = 0
    """Seed of task sampling, generation and minibatch order."""
    save_every: int = field(default=20, metadata={"min": 0})
    """Checkpoint every this many RL steps (0: only at the end)."""
    keep_checkpoints: int = field(default=2, metadata={"min": 1})
    """Newest checkpoints kept on disk."""
    resume: str | None = None
    """"auto" continues the newest checkpoint in the run dir; or a checkpoint path."""
    max_bad_steps: int = field(default=3, metadata={"min": 1})
    """Abort after this many updates with a NaN/inf loss (each is skipped and logged)."""
    num_threads: int | None = field(default=1, metadata={"min": 1})
    """torch intra-op threads (None: torch's default). 1 suits tiny models: their ops are
    too small to split, and extra threads spin and stall whenever another process is busy."""
    save_trajectories: int = field(default=32, metadata={"min": 0})
    """Episodes of each rollout written to `trajectories/` (0: none)."""
    plots: bool = True
    """Write PNG learning curves at the end."""
    report: bool = True
    """Write `report.html` (curves, diagnostics, episodes; `arborl report`) at each
    evaluation and at the end."""
    loggers: list[str] = field(default_factory=lambda: ["tensorboard"])
    """Experiment trackers that get every metric of metrics.jsonl under the same names:
    "tensorboard", "wandb" (offline unless WANDB_MODE is set); `arborl.train.trackers`."""
    progress: bool = True
    """Show the progress bar."""
    engine: str = field(default="local", metadata={"registry": "arborl.train.engine:ENGINES"})
    """Where the model work of the RL loop runs (`arborl.train.engine.ENGINES`): "local"
    (one process), "ray" (a driver over Ray rollout workers and an FSDP2-sharded train
    group, settings in the `ray` section, docs/distributed.md) or "vllm" (local training,
    rollouts on an in-process vLLM synced every step; run from the vLLM venv,
    docs/vllm.md); a plug-in engine by its registered name, an `arborl.engines` entry
    point or `pkg.module:Class` (its settings in `engine_options`)."""
    engine_options: dict[str, Any] = field(default_factory=dict)
    """Settings of a plug-in engine, passed to it as they are (its `check_config` checks
    them); the built-in engines read their own sections (`ray`) and reject these."""

    RENAMED = {
        "backend": "trainer.engine",
        "num_train_ranks": "ray.num_train_ranks",
        "num_rollout_workers": "ray.num_rollout_workers",
        "placement": "ray.placement",
        "one_step_off": "ray.one_step_off",
        "ray_address": "ray.address",
        "ray_cpus_per_worker": "ray.cpus_per_worker",
        "ray_gpus_per_rank": "ray.gpus_per_rank",
        "max_worker_restarts": "ray.max_worker_restarts",
    }
    """Keys that moved (2026-12): an old key fails naming its new place."""

    def validate(self, prefix: str = "trainer") -> None:
        from arborl.train.trackers import check_loggers

        check_loggers(self.loggers, f"{prefix}.loggers")


@dataclass
class TrainConfig:
    """Everything `arborl train` needs."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment."""
    agent: AgentConfig = field(
        default_factory=lambda: AgentConfig(memory="last_k", memory_k=0, include_instruction=False)
    )
    """Prompting, memory and action parsing. The default suits Markov envs such as the
    demo's Maze and a tiny from-scratch model: each prompt is the current observation only
    (no history, no instruction text, which a model trained from scratch cannot read)."""
    rollout: RolloutConfig = field(
        default_factory=lambda: RolloutConfig(num_tasks=16, group_size=8, max_new_tokens=8)
    )
    """How episodes are collected each RL step (16 tasks x 8 episodes: group estimators
    need several episodes of the same task)."""
    search: SearchConfig = field(default_factory=SearchConfig)
    """How each task's search tree is grown when `rollout.mode=tree`."""
    agent_program: AgentProgramConfig = field(default_factory=AgentProgramConfig)
    """The agent you wrote, run once per episode against the training gateway when
    `rollout.mode=program` (docs/agents.md)."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """Advantage estimator and losses."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward sources and weights."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """SFT warm start."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Held-out evaluation."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Run length, outputs, checkpoints, the engine."""
    ray: RayConfig = field(default_factory=RayConfig)
    """The Ray engine's settings (read only with `trainer.engine=ray`)."""
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    """Learn from a teacher on the student's own states (DAgger, on-policy distillation;
    off until `teacher.kind` is set; `algo=distill` trains its term alone)."""

    def validate(self, prefix: str = "config") -> None:
        from arborl.train.rollout_modes import check_modes

        check_modes(self)  # the rollout and action mode records' rules
        if self.rollout.view != "step":
            # batch_rewards, the advantages and the update all read step-view rows; an
            # episode batch crashed the first RL step (KeyError 'step_reward').
            raise ConfigError(
                f"rollout.view={self.rollout.view!r} is not trained by `arborl train` (its "
                "rewards, advantages and update read step-view rows); set rollout.view=step "
                "(the episode view serves `run_rollout` and rescoring checks)"
            )
        check_teacher(self)  # the teacher section against the rest (arborl.train.teacher)


def load_train_config(
    overrides: list[str] | None = None,
    files: list[str | Path] | None = None,
    config_dir: str | Path | None = None,
) -> TrainConfig:
    """Defaults <- files <- group selections <- dotted overrides, all checked."""
    from arborl.train.env_configs import DEFAULT_ENV_GROUP, chooses_env, load_env_group

    def algo_group(name: str) -> dict | None:
        # imported on use: the algorithm records import torch, and a bad key should fail
        # before that (in well under a second)
        from arborl.train.advantages import algorithm_defaults

        return algorithm_defaults(name)

    config_dir = Path(config_dir or CONFIG_DIR)
    groups = {
        "algo": algo_group,  # `algo=NAME`: the algorithm record's defaults
        "env": lambda name: load_env_group(name, config_dir),  # repo files, then plug-ins
    }
    chosen = chooses_env(overrides or [], files or [])
    defaults = {} if chosen else {"env": DEFAULT_ENV_GROUP}  # the demo's Maze
    cfg = load_config(TrainConfig, overrides, config_dir, files, groups, defaults)
    if cfg.model.dtype == "auto":  # resolved once, so every rank and a resume agree
        from arborl.models.precision import resolve_dtype_setting

        cfg.model.dtype = resolve_dtype_setting("auto", cfg.model.name_or_path).dtype
    return cfg
