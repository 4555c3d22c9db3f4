"""WebShop: the generated catalog, search, page navigation, the purchase reward, the oracle."""

from __future__ import annotations

import hashlib
import random

import pytest

from arborl.envs import make, split_of
from arborl.envs.builtin.webshop import (
    CATEGORIES,
    PRODUCTS_PER_CATEGORY,
    TYPE_MISMATCH_FACTOR,
    Product,
    WebShopEnv,
    catalog,
    draw_goal,
    goal_text,
    purchase_reward,
    satisfies,
    search,
)

from ._fuzz import fuzz_actions

SHIRT = Product(
    id="B0TEST01",
    category="t-shirt",
    title="Acorn Slim Fit Cotton T-Shirt",
    attributes=("cotton", "slim fit", "crew neck"),
    options=(("size", ("small", "large")), ("color", ("red", "navy"))),
    price=19.99,
)
GOAL = {
    "category": "t-shirt",
    "attributes": ["cotton", "v-neck"],
    "options": {"color": "red", "size": "medium"},
    "price_max": 20.0,
}


def _fuzz_actions(num: int, seed: int) -> list[str]:
    specials = ["", " ", "click[]", "search[]", "search[" + "🙂" * 10_000 + "]", "click[buy now"]
    return fuzz_actions("clik[]searchbuy<> ", specials, num, seed)


def _task_for(pid: str) -> dict:
    p = catalog()[pid]
    return {
        "product_id": pid,
        "category": p.category,
        "attributes": [p.attributes[0]],
        "options": {p.options[0][0]: p.options[0][1][0]},
        "price_max": 1000.0,
    }


def test_catalog_is_large_varied_and_fixed():
    products = catalog()
    assert len(products) == PRODUCTS_PER_CATEGORY * len(CATEGORIES) >= 1000
    assert {p.category for p in products.values()} == set(CATEGORIES)
    assert all(p.id == pid and p.price > 0 and p.options for pid, p in products.items())
    assert len({p.title for p in products.values()}) > 700
    digest = hashlib.sha256(repr(sorted(products.items())).encode()).hexdigest()
    assert digest[:12] == "45fdf7fdedfc"  # same shop on every machine and Python 3.11+


def test_purchase_reward_by_hand():
    # Goal: 2 attributes, 2 options, a price bound -> 5 parts. The shirt matches cotton (not
    # v-neck), red (not medium, which it lacks) and the price: (1 + 1 + 1) / 5 = 0.6.
    assert purchase_reward(GOAL, SHIRT, {"color": "red", "size": "small"}) == pytest.approx(0.6)
    assert purchase_reward(GOAL, SHIRT, {}) == pytest.approx(0.4)  # options unpicked
    dress = Product("B0TEST02", "dress", "x", ("cotton",), SHIRT.options, 19.99)
    expected = 0.6 * TYPE_MISMATCH_FACTOR  # another category: scaled down
    assert purchase_reward(GOAL, dress, {"color": "red"}) == pytest.approx(expected)
    assert not satisfies(GOAL, SHIRT)
    good = {**GOAL, "attributes": ["cotton", "slim fit"], "options": {"color": "navy"}}
    assert satisfies(good, SHIRT) and purchase_reward(good, SHIRT, {"color": "navy"}) == 1.0
    assert goal_text(GOAL) == (
        "i need a cotton v-neck t-shirt, color: red, size: medium, and price lower than 20.00 dollars"
    )


def test_search_ranks_matching_products_first():
    for pid in sorted(catalog())[:30]:
        assert pid in search(catalog()[pid].title)[:10]
    top = [catalog()[pid] for pid in search("stainless steel insulated water bottle")[:5]]
    assert all(p.category == "water bottle" and "insulated" in p.attributes for p in top)
    assert search("zzzz qqqq") == () and len(search("black")) == 50


def test_navigation_options_and_buy():
    pid = sorted(catalog())[0]
    env = WebShopEnv()
    obs, info = env.reset(options={"task": _task_for(pid)})
    assert "[Search page]" in obs and info["available_actions"] == ["search[<keywords>]"]
    obs, r, term, trunc, info = env.step("search[black]")
    assert obs.startswith("[Results for 'black', page 1 of 5]") and len(obs.splitlines()) == 11
    assert (
        "click[next >]" in info["available_actions"]
        and "click[< prev]" not in info["available_actions"]
    )
    obs, *_, info = env.step("click[next >]")
    assert "page 2 of 5" in obs and "click[< prev]" in info["available_actions"]
    env.step("click[< prev]")
    obs, *_, info = env.step(f"search[{catalog()[pid].title}]")
    assert pid in obs
    obs, *_, info = env.step(f"click[{pid.lower()}]")  # ids match in any case
    assert obs.startswith(f"[Item {pid}]") and "click[buy now]" in info["available_actions"]
    kind, values = catalog()[pid].options[0]
    obs, *_, info = env.step(f"click[{values[0]}]")
    assert f"{kind}={values[0]}" in obs and env.selected == {kind: values[0]}
    obs, r, term, trunc, info = env.step("buy")
    assert (r, term, info["won"]) == (1.0, True, True) and "Reward: 1.000" in obs


def test_invalid_clicks_change_nothing_and_listed_actions_are_valid():
    env = WebShopEnv(max_turns=100)
    env.reset(seed=5)
    for action in ["click[buy now]", "buy", "click[next >]", "search[   ]", "click[B0NOPE00]"]:
        anchor = env._anchor()
        obs, r, term, trunc, info = env.step(action)
        assert not info["valid_action"] and "Invalid action" in obs and env._anchor() == anchor
    rng = random.Random(0)
    for _ in range(60):
        acts = [a for a in env._available_actions() if a != "search[<keywords>]"]
        action = rng.choice(acts) if acts else "search[cotton shirt]"
        *_, term, trunc, info = env.step(action)
        assert info["valid_action"], action
        if term:
            env.reset(seed=5)


def test_tasks_come_from_real_products_and_respect_splits():
    rng = random.Random(0)
    for _ in range(200):
        goal = draw_goal(rng)
        assert satisfies(goal, catalog()[goal["product_id"]])
    env = make("arborl/WebShop-v0", split="val")
    for seed in range(20):
        _, info = env.reset(seed=seed)
        assert split_of(env.task) == "val" and goal_text(env.task) in env.instruction
    with pytest.raises(ValueError, match="lacks field"):
        env.reset(options={"task": {"category": "t-shirt"}})
    with pytest.raises(ValueError, match="'category'='spaceship' is unknown"):
        env.reset(options={"task": {**GOAL, "category": "spaceship"}})
    with pytest.raises(ValueError, match="'price_max'='cheap' must be a number"):
        env.reset(options={"task": {**GOAL, "price_max": "cheap"}})
    with pytest.raises(ValueError, match="'attributes'='cotton' must be a list"):
        env.reset(options={"task": {**GOAL, "attributes": "cotton"}})
    with pytest.raises(TypeError):
        WebShopEnv(num_products=10)


def test_oracle_buys_a_perfect_match_on_every_test_task():
    env = make("arborl/WebShop-v0", split="test")
    for seed in range(100):
        env.reset(seed=seed)
        while not env.done:
            obs, r, *_, info = env.step(env.oracle_action())
        assert r == 1.0 and info["won"] and env.turn <= 8, (seed, env.task)


def test_oracle_recovers_from_a_wrong_page_and_after_restore():
    env = WebShopEnv()
    env.reset(seed=11)
    env.step("search[black]")
    env.step(env._available_actions()[-1])  # some item, most likely not a match
    snap = env.snapshot()
    actions = [env.oracle_action()]
    while not env.done:
        actions.append(env.oracle_action())
        *_, info = env.step(actions[-1])
    assert info["won"]
    env.restore(snap)
    replay = []
    for a in actions[1:]:
        replay.append(env.step(a))
    assert replay[-1][4]["won"] and env.snapshot()["bought"]


def test_snapshot_restore_replays_identically():
    env = WebShopEnv()
    env.reset(seed=2)
    env.step("search[cotton]")
    snap = env.snapshot()
    actions = ["click[next >]", "nonsense", env._available_actions()[-1], "click[< prev]"]
    first = [env.step(a) for a in actions]
    env.restore(snap)
    assert [env.step(a) for a in actions] == first


def test_any_action_string_is_handled():
    env = WebShopEnv()
    env.reset(seed=0)
    for action in _fuzz_actions(1000, seed=4):
        if env.done:
            env.reset(seed=0)
        obs, r, term, trunc, info = env.step(action)
        assert isinstance(obs, str) and len(obs) < 2000 and not info["valid_action"]
