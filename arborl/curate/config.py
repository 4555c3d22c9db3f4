"""`CurateConfig`: what `arborl curate` reads, keeps, mixes, splits and writes.

One dataclass per stage, a docstring under every field, checked before any file is read
(see `arborl.config`). Stages run in the order of the sections: sources -> filters ->
quality -> dedup -> mix -> split -> export.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from arborl.config import ConfigError, load_config

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
"""`configs/` of a source checkout (`configs/curate/*.yaml` are example configs)."""

FORMATS = ("auto", "sharegpt", "openai", "verl", "arborl")


@dataclass
class SourceConfig:
    """One input file (or glob) and how to read it."""

    path: str = ""
    """A file or glob (`data/*.jsonl`); .jsonl, .json (a list) or .parquet."""
    format: str = field(
        default="auto", metadata={"registry": "arborl.curate.formats:FORMATS", "also": ("auto",)}
    )
    """Row format; auto detects it per row from its keys (conversations -> sharegpt,
    messages -> openai, data_source + prompt -> verl, task_id + env_id -> arborl)."""
    domain: str | None = None
    """Domain of every row of this source; None uses the row's env id / data_source."""
    action_format: str = field(
        default="plain", metadata={"registry": "arborl.agent.config:ACTION_FORMATS"}
    )
    """How an assistant turn's text maps to the env action: plain (the text is the
    action), react (`<action>...</action>`), react_text (`Action: ...` on its own line)."""
    split: str | None = None
    """The split this source came labelled as (e.g. a published dataset's val file); only
    used to report tasks that the inputs' own splits shared (leaks), which curation repairs."""
    won: bool | None = None
    """Mark every row as won (e.g. success-only SFT data); None reads a row's own
    `won` / `success` field and defaults to False."""

    def validate(self, prefix: str = "source") -> None:
        if not self.path:
            raise ConfigError(f"{prefix}.path is empty; give a file or glob, e.g. data/*.jsonl")


@dataclass
class FilterConfig:
    """Rows that fail a check are dropped, each with its reason in the report."""

    won_only: bool = False
    """Keep only won episodes."""
    min_return: float | None = None
    """Drop episodes whose undiscounted return is below this (None: no limit)."""
    min_turns: int = field(default=0, metadata={"min": 0})
    """Drop episodes with fewer agent turns (0 keeps prompt-only task rows)."""
    max_turns: int | None = field(default=None, metadata={"min": 1})
    """Drop episodes with more agent turns (None: no limit)."""
    max_tokens: int | None = field(default=None, metadata={"min": 1})
    """Drop episodes whose conversation (all messages) has more tokens (None: no limit)."""
    tokenizer: str = "whitespace"
    """How tokens are counted: whitespace (words), chars, or a model preset / local HF
    checkpoint directory whose tokenizer is loaded."""
    action_format: str = field(
        default="any", metadata={"registry": "arborl.agent.config:ACTION_FORMATS", "also": ("any",)}
    )
    """Every assistant turn must parse in this format (any: no check)."""
    action_regex: str | None = None
    """Every action must fully match this regex, e.g. `(up|down|left|right)` (None: no check)."""
    valid_actions_only: bool = False
    """Drop episodes with a step the env rejected (`info['valid_action']` is False)."""
    charset: Literal["any", "printable", "ascii"] = "printable"
    """printable: no control characters (other than newline/tab) and no U+FFFD (broken
    decoding); ascii: only ASCII; any: no check."""


@dataclass
class QualityConfig:
    """Optional quality scores from a scorer (e.g. a reward model)."""

    scorer: str | None = None
    """A registered scorer (`return`, `won`, `reward_model`, `lm_logprob`, or one added with
    `arborl.curate.register_scorer`) or `module:attr` naming a callable
    `f(trajectories) -> scores`; None scores nothing."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the scorer factory (`{path: DIR}` for reward_model, `{model:
    tiny-0.1m}` for lm_logprob)."""
    min_score: float | None = None
    """Drop rows scoring below this (None: keep all, scores still rank duplicates and
    preference pairs)."""
    batch_size: int = field(default=64, metadata={"min": 1})
    """Trajectories per scorer call."""


@dataclass
class DedupConfig:
    """Exact and near-duplicate removal (MinHash LSH over character shingles)."""

    exact: bool = True
    """Drop rows whose normalised conversation text equals an earlier kept row's."""
    near: bool = True
    """Drop rows whose text is a near duplicate (Jaccard of shingles >= threshold)."""
    threshold: float = field(default=0.85, metadata={"min": 0.0, "max": 1.0})
    """Jaccard similarity of character shingles above which two rows are duplicates."""
    shingle_size: int = field(default=5, metadata={"min": 1})
    """Characters per shingle."""
    num_perm: int = field(default=128, metadata={"min": 16})
    """MinHash signature length (bins) of the LSH candidate search: more bins give a
    closer Jaccard estimate and fewer missed pairs (each shingle is hashed once, whatever
    the number of bins)."""
    same_outcome_only: bool = True
    """Only rows with the same `won` count as duplicates, so a won and a failed episode
    of one task survive together (they make preference pairs)."""
    seed: int = 0
    """Seed of the MinHash shingle hash (and of its densification)."""


@dataclass
class MixConfig:
    """Per-domain mixing ratios (applied before splitting)."""

    ratios: dict[str, float] = field(default_factory=dict)
    """Domain -> weight (normalised to sum 1); empty keeps every domain as it is. Domains
    not listed are dropped."""
    total: int | None = field(default=None, metadata={"min": 1})
    """Rows after mixing; None takes the most rows the ratios allow without repeats."""
    upsample: bool = False
    """Allow repeating rows of a domain that has too few for its share of `total`."""
    seed: int = 0
    """Seed of the per-domain sampling."""


@dataclass
class SplitConfig:
    """Train/val/test splits stratified by domain with no task in two splits."""

    ratios: dict[str, float] = field(
        default_factory=lambda: {"train": 0.8, "val": 0.1, "test": 0.1}
    )
    """Split name -> share of each domain's rows (normalised to sum 1)."""
    text_check: Literal["off", "instruction", "prompt"] = "prompt"
    """Near-duplicate task text that must stay in one split: instruction, prompt
    (instruction + first observation, where the task instance usually lives) or off
    (task id only)."""
    threshold: float = field(default=0.8, metadata={"min": 0.0, "max": 1.0})
    """Jaccard similarity above which two task texts count as the same task."""
    preamble_min_tasks: int = field(default=5, metadata={"min": 2})
    """An instruction shared word for word by this many different tasks is the env's
    preamble (every Maze task has the same one), not task text: it is left out of the
    text check. Fewer tasks sharing one instruction are linked as the same task."""
    seed: int = 0
    """Seed of the group shuffle."""


@dataclass
class ExportConfig:
    """What is written per split under the output folder."""

    kinds: list[str] = field(default_factory=lambda: ["sft", "preference", "rl", "trajectories"])
    """Exports: sft (chat JSONL, loss on assistant turns), preference (chosen/rejected
    pairs), rl (verl-style task parquet for `arborl train env.tasks_file=`), trajectories
    (arborl JSONL, usable as `sft.demos`)."""
    sft_format: Literal["openai", "sharegpt"] = "openai"
    """SFT rows as OpenAI messages (loss mask in `weight`) or ShareGPT (in `loss`)."""
    trajectories_format: str = field(
        default="arborl", metadata={"registry": "arborl.curate.formats:FORMATS"}
    )
    """Format of the `trajectories` export (`trajectories.jsonl`, or `.parquet` for verl);
    fields a format cannot hold are listed in the report's warnings."""
    sft_won_only: bool = True
    """SFT rows only from won episodes (preference and RL exports still use failures)."""
    min_margin: float = field(default=0.0, metadata={"min": 0.0})
    """A preference pair needs chosen score - rejected score > this."""
    max_pairs_per_task: int = field(default=1, metadata={"min": 1})
    """Preference pairs per task (best vs worst first)."""

    def validate(self, prefix: str = "export") -> None:
        known = ("sft", "preference", "rl", "trajectories")
        bad = [k for k in self.kinds if k not in known]
        if bad:
            raise ConfigError(f"{prefix}.kinds has unknown {bad}; choose from {list(known)}")


@dataclass
class CurateConfig:
    """Everything `arborl curate` needs."""

    sources: list[SourceConfig] = field(default_factory=list)
    """Input files, each with its format and domain."""
    filters: FilterConfig = field(default_factory=FilterConfig)
    """Row filters."""
    quality: QualityConfig = field(default_factory=QualityConfig)
    """Optional quality scoring."""
    dedup: DedupConfig = field(default_factory=DedupConfig)
    """Duplicate removal."""
    mix: MixConfig = field(default_factory=MixConfig)
    """Domain mixing."""
    split: SplitConfig = field(default_factory=SplitConfig)
    """Leak-free splits."""
    export: ExportConfig = field(default_factory=ExportConfig)
    """Outputs."""
    output_dir: str = "curated"
    """Folder the exports and the report are written to."""
    strict: bool = False
    """Stop at the first malformed row (naming file, row and field) instead of skipping it."""
    max_memory_mb: int = field(default=256, metadata={"min": 0})
    """Rows held in memory as objects, by estimated size (MB); past it, each further row is
    spooled to a temporary file beside the output folder and read back when a stage needs
    its text: slower, but memory then grows by ~1-3 KB per row whatever the rows' size
    (docs/curation.md, "Memory"). 0 spools every row."""

    def validate(self, prefix: str = "config") -> None:
        for name, ratios in (("mix.ratios", self.mix.ratios), ("split.ratios", self.split.ratios)):
            for key, w in ratios.items():
                if not isinstance(w, int | float) or w < 0:
                    raise ConfigError(f"{name}.{key}={w!r} must be a number >= 0")
            if ratios and sum(ratios.values()) <= 0:
                raise ConfigError(f"{name}={ratios!r} must have a positive total")
        if not self.split.ratios:
            raise ConfigError("split.ratios is empty; e.g. {train: 0.8, val: 0.1, test: 0.1}")
        if not self.sources:
            raise ConfigError(
                "sources is empty; give a config file with `sources: [{path: data/*.jsonl}]` "
                "or the override 'sources=[{path: a.jsonl}]'"
            )


def load_curate_config(
    overrides: list[str] | None = None, files: list[str | Path] | None = None
) -> CurateConfig:
    """Defaults <- YAML `files` <- dotted overrides, all checked before any work."""
    return load_config(CurateConfig, overrides, None, files)
