"""Every field of the training config carries a docstring (what `arborl config docs` prints)."""

from arborl.config import iter_fields
from arborl.train.config import TrainConfig, load_train_config


def test_every_train_config_field_has_a_docstring():
    missing = [path for path, _f, _tp, doc in iter_fields(TrainConfig) if not doc.strip()]
    assert missing == [], f"config fields without a docstring: {missing}"


def test_group_files_load_and_env_files_set_their_own_kwargs():
    # An env group sets its own kwargs; the demo's Maze ones never merge in.
    cfg = load_train_config(["env=sokoban", "algo=gigpo"])
    assert (cfg.env.id, cfg.env.kwargs, cfg.algo.name) == ("arborl/Sokoban-v0", {}, "gigpo")
    assert load_train_config(["env=maze"]).env.kwargs == {"short_actions": True}


def test_every_env_group_file_makes_its_env():
    from arborl.envs import make
    from arborl.envs.packages.manifest import load_manifest
    from arborl.train.config import CONFIG_DIR

    # Envs of the repo's env packages (envpkgs/) live in their own venvs: their group files
    # must name a declared id and an out-of-process pool; tests/envs/packages makes them.
    packaged = {
        e.id
        for m in sorted((CONFIG_DIR.parent / "envpkgs").glob("*/arborl-env.toml"))
        for e in load_manifest(m).envs
    }
    for path in sorted((CONFIG_DIR / "env").glob("*.yaml")):
        cfg = load_train_config([f"env={path.stem}"])
        if cfg.env.id in packaged:
            assert cfg.env.pool_mode in ("subprocess", "ray", "http"), path
            continue
        make(cfg.env.id, **cfg.env.kwargs).close()
