"""Env package manifests (TOML and YAML) and the user registry under ARBORL_HOME."""

from __future__ import annotations

import json
import shutil

import gymnasium
import pytest

from arborl.envs import registry
from arborl.envs.packages.manifest import ManifestError, load_manifest
from arborl.envs.packages.userdata import (
    add_package,
    arborl_home,
    package_of,
    register_package_envs,
    registered_packages,
    require_package,
    run_state_file,
)

from ._pkg import COUNTER_ID, FIXTURE

YAML = """
name: yaml-pkg
python: "3.11"
isolation: http
dependencies:
  pip: ["tinycount==0.1.0"]
  conda: environment.yml
resources: {num_cpus: 2, memory_mb: 512}
envs:
  - id: me/Yaml-v1
    entry_point: "yaml_env:YamlEnv"
    kwargs: {size: 3}
    max_turns: 7
"""


def test_toml_fixture_parses():
    m = load_manifest(FIXTURE)
    assert m.name == "counter-fixture" and m.python == "3.11" and m.isolation == "subprocess"
    assert m.env_ids == [COUNTER_ID] and m.env(COUNTER_ID).max_turns == 12
    assert m.pip == ["./vendor/tinycount"] and m.setup_script == "setup.sh"
    assert m.num_cpus == 0.25 and m.memory_mb == 64 and m.conda == ""
    assert len(m.hash()) == 64 and m.hash() == load_manifest(FIXTURE / "arborl-env.toml").hash()


def test_yaml_manifest(tmp_path):
    (tmp_path / "arborl-env.yaml").write_text(YAML)
    (tmp_path / "environment.yml").write_text("dependencies: [python=3.11, pip]\n")
    m = load_manifest(tmp_path)
    assert (m.name, m.isolation, m.conda, m.num_cpus, m.memory_mb) == (
        "yaml-pkg", "http", "environment.yml", 2.0, 512)  # fmt: skip
    e = m.env("me/Yaml-v1")
    assert e.kwargs == {"size": 3} and e.max_turns == 7 and e.entry_point == "yaml_env:YamlEnv"
    with pytest.raises(KeyError, match=r"has no env 'me/Other-v0'; it has \['me/Yaml-v1'\]"):
        m.env("me/Other-v0")


def test_hash_follows_every_named_file(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(FIXTURE, pkg, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    h0 = load_manifest(pkg).hash()
    (pkg / "vendor" / "tinycount" / "build").mkdir()  # build junk does not count
    (pkg / "vendor" / "tinycount" / "build" / "x.py").write_text("x = 1\n")
    assert load_manifest(pkg).hash() == h0
    (pkg / "setup.sh").write_text("echo changed\n")
    h1 = load_manifest(pkg).hash()
    init = pkg / "vendor" / "tinycount" / "tinycount" / "__init__.py"
    init.write_text(init.read_text() + "\n# edit\n")
    h2 = load_manifest(pkg).hash()
    assert len({h0, h1, h2}) == 3


@pytest.mark.parametrize(
    "text, match",
    [
        ("nmae = 'x'\n[[envs]]\nid='a/B-v0'\nentry_point='m:C'", "unknown key 'nmae'. Did you mean 'name'"),
        ("[[envs]]\nid='noversion'\nentry_point='m:C'", "id='noversion' must be versioned"),
        ("[[envs]]\nid='a/B-v0'\nentry_point='m.C'", "must be 'module:Class'"),
        ("isolation='docker'\n[[envs]]\nid='a/B-v0'\nentry_point='m:C'", "isolation='docker' is not one of"),
        ("python='3'\n[[envs]]\nid='a/B-v0'\nentry_point='m:C'", "python='3' must be 'X.Y'"),
        ("setup_script='nope.sh'\n[[envs]]\nid='a/B-v0'\nentry_point='m:C'", "setup_script='nope.sh' names no file"),
        ("[dependencies]\npipp=['x']\n[[envs]]\nid='a/B-v0'\nentry_point='m:C'", "Did you mean 'pip'"),
        ("[resources]\nnum_cpus=0\n[[envs]]\nid='a/B-v0'\nentry_point='m:C'", "num_cpus=0.0 must be > 0"),
        ("name='x'", "'envs' must be a non-empty list"),
        ("name = [", "cannot parse"),
    ],
)  # fmt: skip
def test_bad_manifests_name_the_problem(tmp_path, text, match):
    (tmp_path / "arborl-env.toml").write_text(text)
    with pytest.raises(ManifestError, match=match):
        load_manifest(tmp_path)


def test_missing_manifest(tmp_path):
    with pytest.raises(ManifestError, match="has no manifest; create one of"):
        load_manifest(tmp_path)
    with pytest.raises(ManifestError, match="does not exist"):
        load_manifest(tmp_path / "nope")


def test_registry_under_arborl_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBORL_HOME", str(tmp_path / "home"))
    assert arborl_home() == tmp_path / "home" and registered_packages() == []
    m = add_package(FIXTURE)
    reg = json.loads((tmp_path / "home" / "packages.json").read_text())
    assert reg == {"counter-fixture": str(FIXTURE.resolve())}
    assert [p.name for p in registered_packages()] == ["counter-fixture"]
    assert package_of(COUNTER_ID).name == m.name and package_of("arborl/Maze-v0") is None
    assert require_package("counter-fixture").env_ids == [COUNTER_ID]
    with pytest.raises(KeyError, match=r"registered env ids: \['fixture/Counter-v0'\]"):
        require_package("me/Nope-v0")
    # register_package_envs writes the global registry: keep that to this test, or every
    # later "all registered envs" test in the session would meet an env it cannot import.
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    try:
        assert register_package_envs() == [COUNTER_ID]
        assert registry.spec(COUNTER_ID).entry_point == "counter_env:CounterEnv"
    finally:
        gymnasium.registry.pop(COUNTER_ID, None)
    assert run_state_file("fixture/Counter-v0").name == "fixture_Counter-v0.json"


def test_clashing_env_ids_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBORL_HOME", str(tmp_path / "home"))
    add_package(FIXTURE)
    other = tmp_path / "other"
    other.mkdir()
    (other / "arborl-env.toml").write_text(
        "name='other'\n[[envs]]\nid='fixture/Counter-v0'\nentry_point='m:C'\n"
    )
    with pytest.raises(ValueError, match="already provided by package 'counter-fixture'"):
        add_package(other)


ENV_TOML = "[[envs]]\nid='a/B-v0'\nentry_point='m:C'\n"


@pytest.mark.parametrize(
    "line, key",
    [
        ("setup_script = '../outside/evil.sh'", "setup_script"),
        ("[dependencies]\nrequirements = '/etc/hostname'", "requirements"),
        ("[dependencies]\npip = ['./../outside/dep']", "dependencies.pip"),
        ("[dependencies]\npip = ['/abs/dep']", "dependencies.pip"),
    ],
)
def test_paths_outside_the_package_are_refused(tmp_path, line, key):
    # Review defect 13: `../` paths ran an outside script on `env setup`, and an absolute
    # requirements path passed `env add`, then crashed `env list` for every package.
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "evil.sh").write_text("touch RAN\n")
    (tmp_path / "outside" / "dep").mkdir()
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "arborl-env.toml").write_text(line + "\n" + ENV_TOML)
    with pytest.raises(ManifestError, match=f"{key}=.*points outside the package folder"):
        load_manifest(pkg)
