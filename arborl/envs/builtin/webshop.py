"""WebShop: find and buy the product an instruction asks for, in a pure-Python shop.

A small re-creation of the WebShop benchmark (Yao et al., 2022) with no server, browser or
data download: a catalog of 1,050 products over 15 categories is generated from a fixed
seed on first use, and instructions ("i need a slim fit cotton t-shirt, color: red,
size: large, and price lower than 30.00 dollars") are derived from a real target product,
so a fully satisfying product always exists. Pages: search, paged results (BM25 over the
product text, top 50, 10 a page) and item pages with options. Simplification: an item's
attributes are shown on its page rather than behind description/feature tabs.

Reward at purchase, as in the paper: (matched goal attributes + matched goal options +
[price <= bound]) / (goal attributes + goal options + 1), times 0.1 when the product is of
another category. The episode terminates at purchase; `won` is reward == 1.
"""

from __future__ import annotations

import functools
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from arborl.envs.base import TextEnv
from arborl.envs.splits import sample_in_split, task_id_of

CATALOG_SEED = 20220701
"""Seed of the product catalog (fixed: every machine sees the same shop)."""
PRODUCTS_PER_CATEGORY = 70
RESULTS_PER_PAGE = 10
MAX_RESULTS = 50
TYPE_MISMATCH_FACTOR = 0.1
"""Reward multiplier for buying a product of another category than the goal's."""

_COLORS = ["black", "white", "navy", "red", "green", "gray", "beige", "pink", "blue", "olive"]
_SIZES = ["x-small", "small", "medium", "large", "x-large", "xx-large"]
_BRANDS = (
    "Northwind Acorn Bluepeak Cedarly Driftwood Emberline Foxglove Granite Harbor Ironleaf "
    "Juniper Kestrel Lumen Maple Nimbus Oakridge Pinecrest Quarry Riverstone Summit"
).split()
# category -> (materials, features, options, (min price, max price))
CATEGORIES: dict[str, tuple[list[str], list[str], dict[str, list[str]], tuple[int, int]]] = {
    "t-shirt": (
        ["cotton", "polyester", "linen", "bamboo"],
        ["short sleeve", "long sleeve", "v-neck", "crew neck", "slim fit", "moisture wicking"],
        {"size": _SIZES, "color": _COLORS},
        (8, 45),
    ),
    "jeans": (
        ["denim", "stretch denim", "organic cotton"],
        ["slim fit", "straight leg", "bootcut", "high waist", "distressed", "button fly"],
        {
            "size": ["28", "30", "32", "34", "36", "38"],
            "color": ["light blue", "dark blue", "black"],
        },
        (20, 90),
    ),
    "sneakers": (
        ["leather", "mesh", "canvas", "suede"],
        ["non slip", "lightweight", "memory foam", "waterproof", "lace up", "slip on"],
        {"size": ["6", "7", "8", "9", "10", "11", "12"], "color": _COLORS},
        (25, 150),
    ),
    "backpack": (
        ["nylon", "polyester", "canvas", "leather"],
        ["water resistant", "laptop sleeve", "usb charging port", "anti theft", "padded straps"],
        {"capacity": ["20l", "30l", "40l"], "color": _COLORS},
        (18, 120),
    ),
    "headphones": (
        ["plastic", "aluminum"],
        ["wireless", "noise cancelling", "over ear", "in ear", "long battery life", "foldable"],
        {"color": ["black", "white", "silver", "blue", "red"]},
        (15, 300),
    ),
    "water bottle": (
        ["stainless steel", "plastic", "glass", "aluminum"],
        ["insulated", "leak proof", "bpa free", "dishwasher safe", "wide mouth", "straw lid"],
        {"size": ["500ml", "750ml", "1l"], "color": _COLORS},
        (6, 45),
    ),
    "desk lamp": (
        ["metal", "wood", "plastic"],
        ["led", "dimmable", "usb charging port", "touch control", "adjustable arm", "eye care"],
        {"color": ["black", "white", "silver"]},
        (12, 80),
    ),
    "yoga mat": (
        ["tpe", "natural rubber", "pvc", "cork"],
        ["non slip", "extra thick", "eco friendly", "carrying strap", "lightweight"],
        {"thickness": ["4mm", "6mm", "8mm"], "color": _COLORS},
        (10, 70),
    ),
    "phone case": (
        ["silicone", "leather", "polycarbonate", "tpu"],
        ["shockproof", "slim", "magnetic", "card holder", "kickstand", "clear"],
        {"model": ["iphone 14", "iphone 15", "galaxy s23", "pixel 8"], "color": _COLORS},
        (5, 40),
    ),
    "coffee mug": (
        ["ceramic", "stainless steel", "glass", "porcelain"],
        ["microwave safe", "dishwasher safe", "insulated", "with lid", "large capacity"],
        {"size": ["12oz", "16oz", "20oz"], "color": _COLORS},
        (6, 35),
    ),
    "throw pillow": (
        ["velvet", "linen", "cotton", "faux fur"],
        ["zipper closure", "machine washable", "decorative", "hypoallergenic"],
        {"size": ["16x16", "18x18", "20x20"], "color": _COLORS},
        (9, 50),
    ),
    "rain jacket": (
        ["nylon", "polyester", "gore-tex"],
        ["waterproof", "hooded", "packable", "breathable", "windproof", "zip pockets"],
        {"size": _SIZES, "color": _COLORS},
        (30, 220),
    ),
    "dress": (
        ["cotton", "chiffon", "satin", "jersey"],
        ["sleeveless", "floral print", "midi length", "maxi length", "v-neck", "pockets"],
        {"size": _SIZES, "color": _COLORS},
        (20, 140),
    ),
    "wristwatch": (
        ["stainless steel", "leather", "silicone", "titanium"],
        ["water resistant", "analog", "digital", "chronograph", "quartz", "luminous hands"],
        {"color": ["black", "silver", "gold", "rose gold", "blue"]},
        (25, 400),
    ),
    "bed sheets": (
        ["cotton", "microfiber", "bamboo", "linen"],
        ["deep pocket", "wrinkle free", "breathable", "cooling", "400 thread count"],
        {"size": ["twin", "full", "queen", "king"], "color": _COLORS},
        (20, 160),
    ),
}


@dataclass(frozen=True)
class Product:
    """One catalog entry; `options` maps an option type to the values it comes in."""

    id: str
    category: str
    title: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: float

    def option_values(self) -> dict[str, tuple[str, ...]]:
        return dict(self.options)


def _make_product(rng: random.Random, pid: str, category: str) -> Product:
    materials, features, options, (lo, hi) = CATEGORIES[category]
    material = rng.choice(materials)
    feats = rng.sample(features, rng.randint(2, 3))
    title = f"{rng.choice(_BRANDS)} {feats[0].title()} {material.title()} {category.title()}"
    opts = []
    for kind, values in options.items():
        k = rng.randint(min(2, len(values)), min(5, len(values)))
        chosen = set(rng.sample(values, k))
        opts.append((kind, tuple(v for v in values if v in chosen)))
    price = max(lo, round(rng.uniform(lo, hi))) - 0.01
    return Product(pid, category, title, (material, *feats), tuple(opts), price)


@functools.lru_cache(maxsize=1)
def catalog() -> dict[str, Product]:
    """The shop's products by id (built once from `CATALOG_SEED`)."""
    rng = random.Random(CATALOG_SEED)
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    ids: set[str] = set()
    while len(ids) < PRODUCTS_PER_CATEGORY * len(CATEGORIES):
        ids.add("B0" + "".join(rng.choice(alphabet) for _ in range(6)))
    ordered = sorted(ids)
    rng.shuffle(ordered)
    products = {}
    for i, pid in enumerate(ordered):
        category = list(CATEGORIES)[i % len(CATEGORIES)]
        products[pid] = _make_product(rng, pid, category)
    return products


@functools.lru_cache(maxsize=1)
def _product_ids() -> tuple[str, ...]:
    return tuple(sorted(catalog()))


def tokenize(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


@functools.lru_cache(maxsize=1)
def _index() -> tuple[dict[str, dict[str, int]], dict[str, int], float]:
    """Inverted index for BM25: term -> {product id: tf}, doc lengths, mean length."""
    postings: dict[str, dict[str, int]] = {}
    lengths: dict[str, int] = {}
    for pid, p in catalog().items():
        words = [p.title, p.category, *p.attributes, *(v for _, vs in p.options for v in vs)]
        tokens = tokenize(" ".join(words))
        lengths[pid] = len(tokens)
        for t in tokens:
            postings.setdefault(t, {}).setdefault(pid, 0)
            postings[t][pid] += 1
    return postings, lengths, sum(lengths.values()) / len(lengths)


@functools.lru_cache(maxsize=2048)
def search(query: str) -> tuple[str, ...]:
    """Ids of the top `MAX_RESULTS` products for `query` by BM25 (ties by id)."""
    postings, lengths, mean_len = _index()
    n, k1, b = len(lengths), 1.2, 0.75
    scores: dict[str, float] = {}
    for term in dict.fromkeys(tokenize(query)[:32]):
        docs = postings.get(term, {})
        idf = math.log(1 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
        for pid, tf in docs.items():
            norm = tf + k1 * (1 - b + b * lengths[pid] / mean_len)
            scores[pid] = scores.get(pid, 0.0) + idf * tf * (k1 + 1) / norm
    ranked = sorted(scores, key=lambda pid: (-scores[pid], pid))
    return tuple(ranked[:MAX_RESULTS])


def purchase_reward(goal: dict[str, Any], product: Product, selected: dict[str, str]) -> float:
    """The WebShop-style reward of buying `product` with `selected` options for `goal`."""
    attrs = sum(a in product.attributes for a in goal["attributes"])
    opts = sum(selected.get(kind) == value for kind, value in goal["options"].items())
    price_ok = int(product.price <= goal["price_max"])
    total = len(goal["attributes"]) + len(goal["options"]) + 1
    reward = (attrs + opts + price_ok) / total
    return reward if product.category == goal["category"] else reward * TYPE_MISMATCH_FACTOR


def satisfies(goal: dict[str, Any], product: Product) -> bool:
    """Whether buying `product` (with the right options picked) earns reward 1."""
    values = product.option_values()
    return (
        product.category == goal["category"]
        and all(a in product.attributes for a in goal["attributes"])
        and all(v in values.get(k, ()) for k, v in goal["options"].items())
        and product.price <= goal["price_max"]
    )


def goal_text(goal: dict[str, Any]) -> str:
    """The shopper's request in words, e.g. 'i need a slim fit cotton t-shirt, ...'."""
    opts = "".join(f", {k}: {v}" for k, v in goal["options"].items())
    attrs = " ".join(goal["attributes"])
    return (
        f"i need a {attrs} {goal['category']}{opts}, and price lower than "
        f"{goal['price_max']:.2f} dollars"
    )


def draw_goal(rng: random.Random) -> dict[str, Any]:
    """A goal built from a random real product, so that one product satisfies it."""
    product = catalog()[rng.choice(_product_ids())]
    attrs = rng.sample(list(product.attributes), rng.randint(1, min(3, len(product.attributes))))
    kinds = [k for k, _ in product.options]
    chosen = rng.sample(kinds, rng.randint(1, len(kinds)))
    options = {k: rng.choice(product.option_values()[k]) for k in kinds if k in chosen}
    bound = math.ceil(product.price * rng.uniform(1.05, 1.6) / 5) * 5
    return {
        "product_id": product.id,
        "category": product.category,
        "attributes": sorted(attrs),
        "options": options,
        "price_max": float(bound),
    }


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


_ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_GOAL_KEYS = ("category", "attributes", "options", "price_max")


class WebShopEnv(TextEnv):
    """Search the shop, open an item, pick its options and buy it."""

    env_id = "arborl/WebShop-v0"
    description = "Find and buy the product that matches the shopping instruction."
    action_format = "search[<keywords>], click[<item id | option value | button>], buy"
    default_max_turns = 15
    _state_attrs = ("page", "query", "page_num", "item_id", "selected", "bought", "reward")

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        super().__init__(split=split, max_turns=max_turns)
        self.page = "search"  # "search" | "results" | "item"
        self.query = ""
        self.page_num = 1
        self.item_id = ""
        self.selected: dict[str, str] = {}
        self.bought = False
        self.reward = 0.0

    # --- tasks ------------------------------------------------------------------------
    def _sample_task(self, rng: random.Random, split: str) -> dict[str, Any]:
        return sample_in_split(rng, split, draw_goal)

    def _task_id(self, task: dict[str, Any]) -> str:
        return task_id_of(task)

    def _start(self, task: dict[str, Any]) -> str:
        missing = [k for k in _GOAL_KEYS if k not in task]
        if missing:
            raise ValueError(f"WebShop task {task!r} lacks field(s) {missing}; see draw_goal()")
        if task["category"] not in CATEGORIES:
            raise ValueError(
                f"WebShop task field 'category'={task['category']!r} is unknown; "
                f"known: {sorted(CATEGORIES)}"
            )
        attrs, opts, bound = task["attributes"], task["options"], task["price_max"]
        if not (isinstance(attrs, list) and all(isinstance(a, str) for a in attrs)):
            raise ValueError(f"WebShop task field 'attributes'={attrs!r} must be a list of str")
        if not (isinstance(opts, dict) and all(isinstance(v, str) for v in opts.values())):
            raise ValueError(f"WebShop task field 'options'={opts!r} must map str to str")
        if isinstance(bound, bool) or not isinstance(bound, int | float):
            raise ValueError(f"WebShop task field 'price_max'={bound!r} must be a number")
        self.page, self.query, self.page_num, self.item_id = "search", "", 1, ""
        self.selected, self.bought, self.reward = {}, False, 0.0
        return f"Instruction: {goal_text(task)}\n{self._render()}"

    def _instruction(self, task: dict[str, Any]) -> str:
        return (
            f"{self.description}\nInstruction: {goal_text(task)}\nActions: search[<keywords>] "
            "(from any page); click[<item id>] on a results page; click[<option value>] and "
            "click[buy now] on an item page; click[next >], click[< prev], "
            "click[back to search]. Reward up to 1 at purchase for the right category, "
            "attributes, options and price."
        )

    # --- pages --------------------------------------------------------------------------
    def _results_page(self) -> list[str]:
        start = (self.page_num - 1) * RESULTS_PER_PAGE
        return list(search(self.query)[start : start + RESULTS_PER_PAGE])

    def _num_pages(self) -> int:
        return max(1, math.ceil(len(search(self.query)) / RESULTS_PER_PAGE))

    def _render(self) -> str:
        if self.page == "search":
            return "[Search page] Type search[<keywords>]."
        if self.page == "results":
            ids = self._results_page()
            head = f"[Results for {self.query!r}, page {self.page_num} of {self._num_pages()}]"
            if not ids:
                return f"{head}\nNo products match; try other keywords."
            products = catalog()
            lines = [f"{pid} | {products[pid].title} | ${products[pid].price:.2f}" for pid in ids]
            return "\n".join([head, *lines])
        p = catalog()[self.item_id]
        opts = "; ".join(f"{k}: {', '.join(vs)}" for k, vs in p.options)
        chosen = ", ".join(f"{k}={v}" for k, v in sorted(self.selected.items())) or "none"
        return (
            f"[Item {p.id}] {p.title}\nPrice: ${p.price:.2f}\nFeatures: "
            f"{', '.join(p.attributes)}\nOptions: {opts}\nSelected: {chosen}"
        )

    def _clickables(self) -> list[str]:
        if self.page == "search":
            return []
        buttons = ["back to search"]
        if self.page == "results":
            if self.page_num > 1:
                buttons.append("< prev")
            if self.page_num < self._num_pages():
                buttons.append("next >")
            return buttons + self._results_page()
        p = catalog()[self.item_id]
        return [*buttons, "< prev", *(v for _, vs in p.options for v in vs), "buy now"]

    def _available_actions(self) -> list[str]:
        return ["search[<keywords>]", *(f"click[{c}]" for c in self._clickables())]

    # --- acting -----------------------------------------------------------------------
    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        text = _norm(action)
        if text in ("buy", "buy now"):
            text = "click[buy now]"
        match = _ACTION_RE.match(text)
        if match is None:
            return self._invalid(f"cannot parse {action[:60]!r}")
        verb, arg = match.group(1), match.group(2).strip()
        if verb == "search":
            if not tokenize(arg):
                return self._invalid("the search query has no keywords")
            self.page, self.query, self.page_num = "results", " ".join(tokenize(arg)[:32]), 1
            self.item_id, self.selected = "", {}
            return self._render(), 0.0, False, True
        return self._click(arg)

    def _invalid(self, why: str) -> tuple[str, float, bool, bool]:
        acts = ", ".join(self._available_actions())
        return f"Invalid action: {why}. Available: {acts}\n{self._render()}", 0.0, False, False

    def _click(self, target: str) -> tuple[str, float, bool, bool]:
        if self.page == "results":
            ids = self._results_page()
            titles = {_norm(catalog()[pid].title): pid for pid in reversed(ids)}
            pid = target.upper() if target.upper() in ids else titles.get(target)
            if pid is not None:
                self.page, self.item_id, self.selected = "item", pid, {}
                return self._render(), 0.0, False, True
        if target == "back to search" and self.page != "search":
            self.page, self.query, self.page_num, self.item_id = "search", "", 1, ""
        elif target == "next >" and self.page == "results" and self.page_num < self._num_pages():
            self.page_num += 1
        elif target == "< prev" and self.page == "results" and self.page_num > 1:
            self.page_num -= 1
        elif target == "< prev" and self.page == "item":
            self.page, self.item_id, self.selected = "results", "", {}
        elif self.page == "item" and target == "buy now":
            return self._buy()
        elif self.page == "item" and (kind := self._option_of(target)) is not None:
            self.selected[kind] = target
        else:
            return self._invalid(f"{target[:60]!r} is not clickable on this page")
        return self._render(), 0.0, False, True

    def _option_of(self, value: str) -> str | None:
        for kind, values in catalog()[self.item_id].options:
            if value in values:
                return kind
        return None

    def _buy(self) -> tuple[str, float, bool, bool]:
        product = catalog()[self.item_id]
        self.reward = purchase_reward(self.task, product, self.selected)
        self.bought = True
        return f"You bought {product.title}. Reward: {self.reward:.3f}", self.reward, True, True

    def _anchor(self) -> tuple:
        selected = tuple(sorted(self.selected.items()))
        return (
            self._task_id(self.task),
            self.page,
            self.query,
            self.page_num,
            self.item_id,
            selected,
            self.bought,
        )

    def _won(self) -> bool:
        return self.bought and self.reward >= 1.0 - 1e-9

    # --- oracle -----------------------------------------------------------------------
    def _oracle_queries(self) -> list[str]:
        goal = self.task
        first = " ".join([*goal["attributes"], goal["category"]])
        target = catalog().get(goal.get("product_id", ""))
        backup = (
            target.title if target is not None else f"{first} {' '.join(goal['options'].values())}"
        )
        return [first, backup]

    def _good_in(self, query: str) -> list[str]:
        products = catalog()
        return [pid for pid in search(query) if satisfies(self.task, products[pid])]

    def oracle_action(self) -> str:
        """Search the goal's words, open a fully matching product, pick options, buy."""
        goal = self.task
        if self.page == "item":
            if not satisfies(goal, catalog()[self.item_id]):
                return "click[< prev]"
            for kind, value in goal["options"].items():
                if self.selected.get(kind) != value:
                    return f"click[{value}]"
            return "click[buy now]"
        if self.page == "results":
            good = self._good_in(self.query)
            if good:
                rank = search(self.query).index(good[0])
                page = rank // RESULTS_PER_PAGE + 1
                if page == self.page_num:
                    return f"click[{good[0]}]"
                return "click[next >]" if page > self.page_num else "click[< prev]"
        for query in self._oracle_queries():
            if self._good_in(query) and " ".join(tokenize(query)) != self.query:
                return f"search[{query}]"
        return f"search[{self._oracle_queries()[-1]}]"
