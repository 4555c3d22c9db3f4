"""Typed configs: defaults <- YAML files <- `group=name` <- dotted overrides, and every bad
key or value fails naming the full key path, the value and what is allowed."""

from dataclasses import dataclass, field, fields
from typing import Literal

import pytest
import yaml

from arborl.config import (
    ConfigError,
    dump_yaml,
    field_docs,
    from_dict,
    iter_fields,
    load_config,
    to_dict,
)


@dataclass
class TrainerCfg:
    total_steps: int = field(default=10, metadata={"min": 1, "max": 1000})
    """Number of optimizer steps."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """Parameter dtype during training."""
    device: str = field(default="cpu", metadata={"choices": ("cpu", "cuda")})
    """Where the policy lives."""
    eval_every: int | None = None
    """Steps between evaluations;
    null turns evaluation off."""
    log_keys: list[str] = field(default_factory=list)
    """Metrics shown on the progress bar."""


@dataclass
class AlgoCfg:
    name: str = "ppo"
    """Registry name of the algorithm."""
    group_size: int = field(default=4, metadata={"min": 1})
    """Samples per task."""
    kl_coef: float = 0.0
    """Weight of the KL penalty."""
    normalize_adv: bool = True
    """Divide advantages by their group std."""

    def validate(self, path: str) -> None:
        if self.name == "grpo" and self.group_size < 2:
            raise ValueError(f"{path}.group_size must be >= 2 for grpo")


@dataclass
class OptimCfg:
    lr: float = field(default=1e-3, metadata={"min": 0.0})
    """Learning rate."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """Adam betas."""


@dataclass
class Cfg:
    seed: int = 0
    """Seed every random choice flows from."""
    run_name: str | None = None
    """Folder name under runs/; null picks a timestamp."""
    trainer: TrainerCfg = field(default_factory=TrainerCfg)
    """Training loop."""
    algo: AlgoCfg = field(default_factory=AlgoCfg)
    """Algorithm."""
    optim: OptimCfg = field(default_factory=OptimCfg)
    """Optimizer."""


@pytest.fixture
def config_dir(tmp_path):
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "grpo.yaml").write_text("name: grpo\ngroup_size: 8\nkl_coef: 0.04\n")
    (tmp_path / "algo" / "ppo.yaml").write_text("name: ppo\n")
    return tmp_path


def _load(*overrides: str, **kw) -> Cfg:
    return load_config(Cfg, list(overrides), **kw)


# --- layering -------------------------------------------------------------------------------
def test_defaults() -> None:
    cfg = _load()
    assert cfg == Cfg()
    assert cfg.trainer.total_steps == 10 and cfg.optim.betas == [0.9, 0.999]
    assert to_dict(cfg)["algo"] == {
        "name": "ppo",
        "group_size": 4,
        "kl_coef": 0.0,
        "normalize_adv": True,
    }


def test_yaml_files_layer_in_order(tmp_path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("seed: 1\ntrainer:\n  total_steps: 20\n  device: cuda\nalgo:\n  kl_coef: 0.1\n")
    extra = tmp_path / "extra.yaml"
    extra.write_text("trainer:\n  total_steps: 30\n")
    cfg = _load(files=[base, extra])
    # The later file wins key by key; sections are merged, not replaced.
    assert cfg.trainer.total_steps == 30 and cfg.trainer.device == "cuda"
    assert cfg.seed == 1 and cfg.algo.kl_coef == 0.1 and cfg.algo.group_size == 4


def test_group_selection(config_dir, tmp_path) -> None:
    cfg = _load("algo=grpo", config_dir=config_dir)
    assert (cfg.algo.name, cfg.algo.group_size, cfg.algo.kl_coef) == ("grpo", 8, 0.04)
    assert cfg.algo.normalize_adv is True  # keys the group file leaves out keep defaults

    base = tmp_path / "base.yaml"
    base.write_text("algo:\n  group_size: 2\n  normalize_adv: false\n")
    # Dotted overrides apply last, whatever their place on the command line.
    cfg = _load("algo.group_size=16", "algo=grpo", files=[base], config_dir=config_dir)
    assert cfg.algo.group_size == 16 and cfg.algo.normalize_adv is False


def test_dotted_override_types() -> None:
    cfg = _load(
        "trainer.total_steps=3",
        "algo.kl_coef=0.05",
        "optim.lr=1e-5",  # PyYAML reads this as a string; float fields accept it
        "algo.normalize_adv=false",
        "run_name=exp1",
        "trainer.log_keys=[loss, reward/mean]",
        "optim.betas=[0.8, 1]",
        "trainer.eval_every=5",
    )
    assert cfg.trainer.total_steps == 3 and type(cfg.trainer.total_steps) is int
    assert cfg.algo.kl_coef == 0.05 and cfg.optim.lr == 1e-5
    assert cfg.algo.normalize_adv is False and cfg.run_name == "exp1"
    assert cfg.trainer.log_keys == ["loss", "reward/mean"]
    assert cfg.optim.betas == [0.8, 1.0] and type(cfg.optim.betas[1]) is float
    assert cfg.trainer.eval_every == 5
    assert _load("trainer.eval_every=null", "run_name=").trainer.eval_every is None
    assert _load("algo.kl_coef=1").algo.kl_coef == 1.0 and type(_load("seed=7").seed) is int
    assert _load("run_name=42").run_name == "42"  # a number given to a str field


def test_dump_yaml_round_trip(tmp_path) -> None:
    cfg = _load("trainer.log_keys=[loss]", "algo.kl_coef=0.5", "run_name=r")
    path = dump_yaml(cfg, tmp_path / "out" / "config.yaml")
    assert yaml.safe_load(path.read_text()) == to_dict(cfg)
    assert _load(files=[path]) == cfg


# --- errors ---------------------------------------------------------------------------------
def test_unknown_key_suggests_the_full_path() -> None:
    with pytest.raises(ConfigError) as e:
        _load("trainer.totl_steps=3")
    msg = str(e.value)
    assert "unknown config key 'trainer.totl_steps'" in msg
    assert "Did you mean trainer.total_steps?" in msg
    assert "total_steps, precision, device, eval_every, log_keys" in msg

    with pytest.raises(ConfigError, match=r"'trainr'\. Did you mean trainer\?"):
        _load("trainr.total_steps=3")


def test_unknown_key_in_a_yaml_file(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 0.1\n  beta: [0.9, 0.9]\n")
    with pytest.raises(ConfigError, match=r"'optim\.beta'\. Did you mean optim\.betas\?"):
        _load(files=[path])


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.total_steps=abc", "trainer.total_steps='abc': expected an int"),
        ("trainer.total_steps=2.5", "trainer.total_steps=2.5: expected an int"),
        ("algo.normalize_adv=maybe", "algo.normalize_adv='maybe': expected a bool"),
        ("algo.kl_coef=high", "algo.kl_coef='high': expected a number"),
        ("optim.betas=[0.9, x]", "optim.betas[1]='x': expected a number"),
        ("optim.betas=0.9", "optim.betas=0.9: expected a list"),
        ("trainer.eval_every=soon", "trainer.eval_every='soon': expected int | null"),
        ("trainer=5", "trainer=5: expected a section"),
    ],
)
def test_wrong_type_names_path_and_value(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(override)
    assert message in str(e.value)


def test_out_of_range_names_the_bound() -> None:
    with pytest.raises(ConfigError, match=r"trainer\.total_steps=0 is below the minimum 1"):
        _load("trainer.total_steps=0")
    with pytest.raises(ConfigError, match=r"trainer\.total_steps=5000 is above the maximum 1000"):
        _load("trainer.total_steps=5000")
    with pytest.raises(ConfigError, match=r"optim\.lr=-0\.1 is below the minimum 0\.0"):
        _load("optim.lr=-0.1")
    with pytest.raises(
        ConfigError, match=r"trainer\.device='cdua' is not allowed; choose one of \['cpu', 'cuda'\]"
    ) as e:
        _load("trainer.device=cdua")
    assert "Did you mean 'cuda'?" in str(e.value)


def test_bad_literal_lists_allowed_values() -> None:
    with pytest.raises(ConfigError) as e:
        _load("trainer.precision=fp16")
    assert "trainer.precision='fp16' is not allowed; choose one of ['fp32', 'bf16']" in str(e.value)


def test_unknown_group_name_lists_choices(config_dir) -> None:
    with pytest.raises(ConfigError) as e:
        _load("algo=grpoo", config_dir=config_dir)
    msg = str(e.value)
    assert "algo='grpoo'" in msg and "choose one of ['grpo', 'ppo']" in msg
    assert "Did you mean algo=grpo?" in msg


def test_validate_hook_errors_become_config_errors(config_dir) -> None:
    with pytest.raises(ConfigError, match=r"algo\.group_size must be >= 2 for grpo"):
        _load("algo=grpo", "algo.group_size=1", config_dir=config_dir)


def test_malformed_overrides_and_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="not of the form key=value"):
        _load("trainer.total_steps")
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        _load(files=[bad])
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top, got list"):
        _load(files=[bad])


def test_from_dict_checks_nested_mappings() -> None:
    cfg = from_dict(Cfg, {"trainer": {"total_steps": 7}, "optim": {"betas": (0.5, 0.6)}})
    assert cfg.trainer.total_steps == 7 and cfg.optim.betas == [0.5, 0.6]
    with pytest.raises(ConfigError, match=r"trainer\.precision="):
        from_dict(Cfg, {"trainer": {"precision": "int8"}})


# --- introspection --------------------------------------------------------------------------
def test_field_docs_cover_every_field() -> None:
    for cls in (Cfg, TrainerCfg, AlgoCfg, OptimCfg):
        docs = field_docs(cls)
        assert set(docs) == {f.name for f in fields(cls)}, cls.__name__
        assert all(docs.values()), cls.__name__
    assert field_docs(TrainerCfg)["total_steps"] == "Number of optimizer steps."
    multi_line = field_docs(TrainerCfg)["eval_every"]
    assert multi_line == "Steps between evaluations;\nnull turns evaluation off."


def test_iter_fields_paths() -> None:
    rows = list(iter_fields(Cfg))
    paths = [p for p, *_ in rows]
    assert paths == [
        "seed",
        "run_name",
        "trainer",
        "trainer.total_steps",
        "trainer.precision",
        "trainer.device",
        "trainer.eval_every",
        "trainer.log_keys",
        "algo",
        "algo.name",
        "algo.group_size",
        "algo.kl_coef",
        "algo.normalize_adv",
        "optim",
        "optim.lr",
        "optim.betas",
    ]
    by_path = {p: (f, tp, doc) for p, f, tp, doc in rows}
    assert by_path["trainer"][1] is TrainerCfg and by_path["algo.kl_coef"][1] is float
    assert by_path["optim.lr"][0].metadata["min"] == 0.0
    assert by_path["algo.group_size"][2] == "Samples per task."


def test_partial_section_override_keeps_the_parents_section_defaults() -> None:
    # TrainConfig's rollout default is RolloutConfig(num_tasks=16, group_size=8,
    # max_new_tokens=8); RolloutConfig's own defaults differ (group_size=1, ...).
    from arborl.rollout import RolloutConfig
    from arborl.train.config import TrainConfig

    own = RolloutConfig()
    cfg = load_config(TrainConfig, ["rollout.num_tasks=4"])
    assert cfg.rollout.num_tasks == 4
    assert (cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (8, 8)
    assert (own.group_size, own.max_new_tokens) != (8, 8)  # so the check above can fail
    # an explicit value still wins, and a section given in full is left as given
    cfg = load_config(TrainConfig, ["rollout.num_tasks=4", "rollout.group_size=2"])
    assert (cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (2, 8)


def test_a_bad_train_key_fails_before_torch_is_imported() -> None:
    """`arborl train` checks its config before anything heavy: a typo fails in a fraction
    of a second, not after torch's import (the algorithm records import torch, and only
    `algo=NAME` needs them)."""
    import json
    import subprocess
    import sys

    probe = (
        "import json, sys\n"
        "from arborl.config import ConfigError\n"
        "from arborl.train.config import load_train_config\n"
        "try:\n"
        "    load_train_config(['trainer.totl_steps=3'])\n"
        "    err = ''\n"
        "except ConfigError as e:\n"
        "    err = str(e)\n"
        "print(json.dumps({'err': err, 'torch': 'torch' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "trainer.totl_steps" in result["err"] and "total_steps" in result["err"]
    assert result["torch"] is False
