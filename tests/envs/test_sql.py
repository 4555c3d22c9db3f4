"""SQL: gold answers checked in plain Python, read-only enforcement, limits, the oracle."""

from __future__ import annotations

import copy
import pickle
import time
from collections import Counter

import pytest

from arborl.envs import make, split_of
from arborl.envs.builtin.sql import MAX_ROWS, SQLEnv, answers_match, generate_rows

from ._fuzz import fuzz_actions

BASE = {"db_seed": 7, "num_employees": 40, "num_orders": 80}


def _task(template: str, **params) -> dict:
    return {**BASE, "template": template, "params": params}


def _fuzz_actions(num: int, seed: int) -> list[str]:
    specials = ["", " ", "sql[]", "answer[]", "sql[" + "x" * 10_000 + "]", "sql[select"]
    return fuzz_actions("selct*from; '\"()[]sqlanswer", specials, num, seed)


def _table_state(env: SQLEnv) -> list:
    conn = env._db()
    tables = conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    counts = [conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone() for name, _ in tables]
    return tables + counts


def test_gold_answers_match_plain_python():
    rows = generate_rows(7, 40, 80)
    depts = {d[0]: d[1] for d in rows["departments"]}
    env = SQLEnv()
    dept = rows["departments"][0][1]
    env.reset(options={"task": _task("count_dept", dept=dept)})
    assert env.gold == sum(depts[e[2]] == dept for e in rows["employees"])
    env.reset(options={"task": _task("max_order", customer="Acme")})
    assert env.gold == max(o[3] for o in rows["orders"] if o[2] == "Acme")
    env.reset(options={"task": _task("top_seller", status="shipped")})
    names = {e[0]: e[1] for e in rows["employees"]}
    counts = Counter(names[o[1]] for o in rows["orders"] if o[5] == "shipped").most_common(2)
    assert counts[0][1] > counts[1][1] and env.gold == counts[0][0]
    assert "Question: Which employee handled the most shipped orders?" in env.instruction


def test_query_then_answer():
    env = SQLEnv()
    obs, info = env.reset(options={"task": _task("max_order", customer="Acme")})
    assert "orders(id INTEGER PRIMARY KEY" in obs and "customer Acme" in obs
    obs, r, term, trunc, info = env.step(
        "sql[SELECT MAX(amount) AS m FROM orders WHERE customer='Acme']"
    )
    assert obs.splitlines()[0] == "m" and float(obs.splitlines()[1]) == env.gold
    assert info["valid_action"] and not term
    obs, r, term, trunc, info = env.step(f"answer[{env.gold:,}]")
    assert (r, term, info["won"]) == (1.0, True, True)


def test_answer_matching():
    assert answers_match(" 'ava diaz'. ", "Ava Diaz") and not answers_match("Ava", "Ava Diaz")
    assert answers_match("1,234", 1234) and answers_match("1234.0000001", 1234)
    assert not answers_match("1235", 1234) and not answers_match("many", 3)


def test_writes_are_refused_and_the_db_is_unchanged():
    env = SQLEnv(max_turns=50)
    env.reset(options={"task": _task("count_dept", dept="Sales")})
    before = _table_state(env)
    for stmt in [
        "DROP TABLE employees",
        "INSERT INTO orders VALUES (999, 1, 'Evil', 1.0, 2020, 'shipped')",
        "UPDATE employees SET salary = 0",
        "DELETE FROM orders",
        "CREATE TABLE t(x)",
        "ATTACH DATABASE ':memory:' AS other",
        "PRAGMA writable_schema = ON",
        "PRAGMA query_only = OFF",
        "SELECT 1; DROP TABLE orders",
        "BEGIN",
        "VACUUM",
    ]:
        obs, r, term, trunc, info = env.step(f"sql[{stmt}]")
        assert obs.startswith("SQL error") and not info["valid_action"] and not trunc, stmt
    assert _table_state(env) == before
    assert env.step("sql[PRAGMA table_info(orders)]")[4]["valid_action"]  # reads are allowed


def test_runaway_queries_are_stopped():
    env = SQLEnv()
    env.reset(options={"task": _task("count_dept", dept="Sales")})
    start = time.monotonic()
    loop = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    obs, r, term, trunc, info = env.step(f"sql[{loop}]")
    assert "stopped after" in obs and not info["valid_action"]
    obs, *_, info = env.step("sql[SELECT COUNT(*) FROM orders a, orders b, orders c, orders d]")
    assert "stopped after" in obs and time.monotonic() - start < 5.0
    obs, *_, info = env.step("sql[SELECT randomblob(100000000)]")
    assert "too big" in obs and not info["valid_action"]


def test_output_is_cut_to_the_row_limit():
    env = SQLEnv()
    env.reset(options={"task": _task("count_dept", dept="Sales")})
    obs, *_, info = env.step("sql[SELECT id, customer FROM orders ORDER BY id]")
    lines = obs.splitlines()
    assert (
        lines[0] == "id | customer" and len(lines) == MAX_ROWS + 2 and "more than 20" in lines[-1]
    )
    assert env.step("sql[SELECT * FROM orders WHERE id < 0]")[0].endswith("(no rows)")


def test_bad_tasks_and_knobs_are_rejected():
    with pytest.raises(ValueError, match="template='nope' is unknown"):
        SQLEnv().reset(options={"task": _task("nope")})
    with pytest.raises(ValueError, match="lacks field 'db_seed'"):
        SQLEnv().reset(options={"task": {"template": "count_dept"}})
    with pytest.raises(ValueError, match="empty gold answer"):
        SQLEnv().reset(options={"task": _task("max_order", customer="Nobody")})
    with pytest.raises(ValueError, match="num_employees"):
        SQLEnv(num_employees=5)
    with pytest.raises(ValueError, match=r"has unknown or no names \['nope'\]; choose from"):
        SQLEnv(templates=["count_dept", "nope"])
    with pytest.raises(TypeError):
        SQLEnv(rows=10)


def test_oracle_solves_every_test_task():
    env = make("arborl/SQL-v0", split="test")
    templates = set()
    for seed in range(100):
        env.reset(seed=seed)
        assert split_of(env.task) == "test"
        templates.add(env.task["template"])
        while not env.done:
            *_, info = env.step(env.oracle_action())
        assert info["won"] and env.turn == 2
    assert len(templates) >= 6


def test_snapshot_excludes_the_connection_and_restore_rebuilds_it():
    env = SQLEnv()
    env.reset(options={"task": _task("max_order", customer="Acme")})
    env.step("sql[SELECT 1]")
    snap = env.snapshot()
    assert "_conn" not in snap
    actions = [env.oracle_action(), "sql[SELECT COUNT(*) FROM orders]", "answer[1]"]
    first = [env.step(a) for a in actions]
    env.reset(options={"task": {**_task("count_dept", dept="Sales"), "db_seed": 8}})
    env.restore(snap)  # a different task's database was loaded meanwhile
    assert [env.step(a) for a in actions] == first
    clone = copy.deepcopy(env)
    assert pickle.loads(pickle.dumps(env)).gold == clone.gold == env.gold
    env.close()
    env.close()


def test_any_action_string_is_handled():
    env = SQLEnv()
    env.reset(seed=0)
    for action in _fuzz_actions(1000, seed=3):
        if env.done:
            env.reset(seed=0)
        obs, r, term, trunc, info = env.step(action)
        assert isinstance(obs, str) and len(obs) < 400 and not info["valid_action"]
