"""The fast packages (BabyAI, TextWorld-Express) pass arborl's `check_env` through the
subprocess, Ray and HTTP pools, and Gymnasium's own `env_checker` through `gymnasium.make`,
in their isolated venvs. (ALFWorld and ScienceWorld run the same checks in their own test
modules, with the longer timeouts their engines need.) In Ray mode the actor runs in
Ray's interpreter and forwards to a stdio worker in the package's venv."""

from __future__ import annotations

import pytest

from ._real import assert_checks_through_pool, gym_check, set_up

pytestmark = pytest.mark.slow
CASES = {
    "babyai/GoToLocal-v0": ("babyai", "babyai_env:GoToLocalEnv", 64),
    "twx/CoinCollector-v0": ("twx", "twx_env:CoinCollectorEnv", 30),
}


@pytest.mark.parametrize("mode", ["subprocess", "ray", "http"])
@pytest.mark.parametrize("env_id", list(CASES))
def test_check_env_through_pool(env_id, mode, monkeypatch, capsys, request):
    set_up(CASES[env_id][0], monkeypatch)
    if mode == "ray":
        request.getfixturevalue("local_ray")
    assert_checks_through_pool(env_id, mode, capsys)


@pytest.mark.parametrize("env_id", list(CASES))
def test_gymnasium_checker(env_id, monkeypatch):
    package, entry, turns = CASES[env_id]
    assert "GYM_CHECK_OK" in gym_check(set_up(package, monkeypatch), env_id, entry, turns, "train")
