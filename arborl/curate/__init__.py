"""Training data curation: standardize trajectories from any source, filter, de-duplicate,
mix domains, split without leakage, export SFT / preference / RL data, and report.

    from arborl.curate import load_curate_config, run_curation
    report = run_curation(load_curate_config(files=["configs/curate/default.yaml"]))

Every stage works on `Record`s (a `Trajectory` plus its file and row), so the report can
name the reason for every dropped row. `arborl curate` is the command-line front end;
`docs/curation.md` is the guide.
"""

from arborl.curate.config import (
    CurateConfig,
    DedupConfig,
    ExportConfig,
    FilterConfig,
    MixConfig,
    QualityConfig,
    SourceConfig,
    SplitConfig,
    load_curate_config,
)
from arborl.curate.formats import FORMATS, LossyExportWarning, parse_row, write_format
from arborl.curate.pipeline import curate, run_curation, write_outputs
from arborl.curate.read import read_sources
from arborl.curate.records import FieldError, MalformedRow, Record
from arborl.curate.report import Report
from arborl.curate.scoring import SCORERS, Scorer, make_scorer, register_scorer

__all__ = [
    "FORMATS",
    "SCORERS",
    "CurateConfig",
    "DedupConfig",
    "ExportConfig",
    "FieldError",
    "FilterConfig",
    "LossyExportWarning",
    "MalformedRow",
    "MixConfig",
    "QualityConfig",
    "Record",
    "Report",
    "Scorer",
    "SourceConfig",
    "SplitConfig",
    "curate",
    "load_curate_config",
    "make_scorer",
    "parse_row",
    "read_sources",
    "register_scorer",
    "run_curation",
    "write_format",
    "write_outputs",
]
