"""SQL: answer a question about a small company database by querying it with SQLite.

A task is `{"db_seed", "num_employees", "num_orders", "template", "params"}`: plain JSON.
The database (departments, employees, orders) is regenerated from the seed in memory when
the episode starts, and the gold answer is the result of the template's gold SQL, so tasks
stay tiny and the answer cannot drift from the data. Draws whose gold answer is empty or
tied (an "arg max" with two winners) are rejected at creation.

The agent's queries run on a connection that cannot write: `PRAGMA query_only`, plus an
authorizer that allows only reads (SELECT, reading columns, functions, recursive CTEs and
the `table_info`/`table_list` pragmas) and denies INSERT, DROP, ATTACH, writable_schema and
everything else. A progress handler stops a query after a fixed number of SQLite VM steps
(deterministic) or a wall-clock backstop, and output is cut to `MAX_ROWS` rows. The sqlite
connection is not part of the snapshot: it is rebuilt lazily from the task when needed.
"""

from __future__ import annotations

import math
import random
import re
import sqlite3
import time
from typing import Any

from arborl.envs.base import TextEnv
from arborl.envs.builtin._safe_calc import format_number, parse_number
from arborl.envs.splits import chosen_templates, sample_in_split, task_id_of

MAX_ROWS = 20
"""Rows of a result shown to the agent."""
MAX_QUERY_CHARS = 2000
"""Longest query accepted."""
MAX_VM_STEPS = 2_000_000
"""SQLite virtual-machine instructions a query may run before it is stopped."""
MAX_QUERY_SECONDS = 2.0
"""Wall-clock backstop for one query."""
_PROGRESS_EVERY = 1000

_DEPTS = ["Sales", "Engineering", "Marketing", "Finance", "Support", "Legal", "Operations"]
_CITIES = ["Boston", "Denver", "Austin", "Seattle", "Chicago"]
_FIRST = "Ava Ben Cara Dan Eli Fay Gus Hana Ivan Jade Kai Lena Milo Nina Omar Pia Raj Sara Tom Uma"
_LAST = "Adams Brooks Chen Diaz Evans Ford Garcia Hill Ito Jones Khan Lopez Moore Nash Ortiz Patel"
_TITLES = ["Analyst", "Engineer", "Manager", "Associate", "Director", "Specialist"]
_CUSTOMERS = (
    "Acme Globex Initech Umbrella Hooli Stark Wayne Wonka Tyrell Cyberdyne Soylent Vandelay"
)
_STATUSES = ["shipped", "pending", "cancelled", "returned"]

SCHEMA = (
    "departments(id INTEGER PRIMARY KEY, name TEXT, city TEXT, budget INTEGER)",
    "employees(id INTEGER PRIMARY KEY, name TEXT, dept_id INTEGER, title TEXT, "
    "salary INTEGER, hire_year INTEGER)",
    "orders(id INTEGER PRIMARY KEY, employee_id INTEGER, customer TEXT, amount REAL, "
    "year INTEGER, status TEXT)",
)

_JOIN = "FROM employees e JOIN departments d ON e.dept_id = d.id"
_OJOIN = "FROM orders o JOIN employees e ON o.employee_id = e.id"
# name -> (question, gold SQL, SQL giving the top-2 metric values to reject ties, or "").
TEMPLATES: dict[str, tuple[str, str, str]] = {
    "count_dept": (
        "How many employees work in the {dept} department?",
        f"SELECT COUNT(*) {_JOIN} WHERE d.name = {{dept!q}}",
        "",
    ),
    "salary_city": (
        "What is the total salary of all employees whose department is located in {city}?",
        f"SELECT SUM(e.salary) {_JOIN} WHERE d.city = {{city!q}}",
        "",
    ),
    "max_order": (
        "What is the largest amount of a single order placed by customer {customer}?",
        "SELECT MAX(amount) FROM orders WHERE customer = {customer!q}",
        "",
    ),
    "avg_title": (
        "What is the average salary of employees with the title {title}, rounded to 2 decimals?",
        "SELECT ROUND(AVG(salary), 2) FROM employees WHERE title = {title!q}",
        "",
    ),
    "hired_since": (
        "How many employees hired in {year} or later earn more than {salary} dollars?",
        "SELECT COUNT(*) FROM employees WHERE hire_year >= {year} AND salary > {salary}",
        "",
    ),
    "dept_orders": (
        "What is the total amount of {status} orders handled by employees of the {dept} "
        "department, rounded to 2 decimals?",
        f"SELECT ROUND(SUM(o.amount), 2) {_OJOIN} JOIN departments d ON e.dept_id = d.id "
        "WHERE o.status = {status!q} AND d.name = {dept!q}",
        "",
    ),
    "top_seller": (
        "Which employee handled the most {status} orders? Give the full name.",
        f"SELECT e.name {_OJOIN} WHERE o.status = {{status!q}} GROUP BY e.id "
        "ORDER BY COUNT(*) DESC, e.name LIMIT 1",
        f"SELECT COUNT(*) AS n {_OJOIN} WHERE o.status = {{status!q}} GROUP BY e.id "
        "ORDER BY n DESC LIMIT 2",
    ),
    "top_dept_salary": (
        "Which department has the highest average salary? Give its name.",
        f"SELECT d.name {_JOIN} GROUP BY d.id ORDER BY AVG(e.salary) DESC, d.name LIMIT 1",
        f"SELECT AVG(e.salary) AS a {_JOIN} GROUP BY d.id ORDER BY a DESC LIMIT 2",
    ),
}


def _quote(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _fill(sql: str, params: dict[str, Any]) -> str:
    """Substitute `{name}` (literal) and `{name!q}` (quoted string) placeholders."""

    def sub(match: re.Match) -> str:
        name, quoted = match.group(1), match.group(2)
        if name not in params:
            raise ValueError(f"SQL task params {params!r} lack {name!r}")
        return _quote(params[name]) if quoted else str(int(params[name]))

    return re.sub(r"\{(\w+)(!q)?\}", sub, sql)


def generate_rows(db_seed: int, num_employees: int, num_orders: int) -> dict[str, list[tuple]]:
    """The rows of each table, a pure function of the seed and sizes."""
    rng = random.Random(db_seed)
    depts = rng.sample(_DEPTS, rng.randint(4, len(_DEPTS)))
    dept_rows = [
        (i + 1, name, rng.choice(_CITIES), rng.randrange(200, 2000) * 1000)
        for i, name in enumerate(depts)
    ]
    names = [f"{f} {last}" for f in _FIRST.split() for last in _LAST.split()]
    emp_rows = [
        (
            i + 1,
            name,
            rng.randint(1, len(depts)),
            rng.choice(_TITLES),
            rng.randrange(76, 370) * 500,
            rng.randint(2008, 2024),
        )
        for i, name in enumerate(rng.sample(names, num_employees))
    ]
    customers = _CUSTOMERS.split()
    order_rows = [
        (
            i + 1,
            rng.randint(1, num_employees),
            rng.choice(customers),
            round(rng.uniform(20, 5000), 2),
            rng.randint(2019, 2024),
            rng.choice(_STATUSES),
        )
        for i in range(num_orders)
    ]
    return {"departments": dept_rows, "employees": emp_rows, "orders": order_rows}


def build_db(task: dict[str, Any]) -> sqlite3.Connection:
    """A fresh in-memory database for the task, locked read-only."""
    rows = generate_rows(int(task["db_seed"]), int(task["num_employees"]), int(task["num_orders"]))
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    for table in SCHEMA:
        conn.execute(f"CREATE TABLE {table}")
    for name, table_rows in rows.items():
        marks = ",".join("?" * len(table_rows[0]))
        conn.executemany(f"INSERT INTO {name} VALUES ({marks})", table_rows)
    conn.commit()
    conn.execute("PRAGMA query_only = ON")
    conn.set_authorizer(_authorize)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    return conn


_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_READ_ACTIONS.add(getattr(sqlite3, "SQLITE_RECURSIVE", 33))
_READ_PRAGMAS = {"table_info", "table_xinfo", "table_list"}


def _authorize(action: int, arg1: Any, arg2: Any, db_name: Any, trigger: Any) -> int:
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and str(arg1).lower() in _READ_PRAGMAS and arg2:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def run_query(conn: sqlite3.Connection, query: str, max_rows: int = MAX_ROWS) -> tuple:
    """(column names, up to max_rows + 1 rows) of a read-only query; raises sqlite3 errors."""
    calls = 0
    deadline = time.monotonic() + MAX_QUERY_SECONDS

    def progress() -> int:
        nonlocal calls
        calls += 1
        return int(calls * _PROGRESS_EVERY > MAX_VM_STEPS or time.monotonic() > deadline)

    conn.set_progress_handler(progress, _PROGRESS_EVERY)
    try:
        cursor = conn.execute(query)
        try:
            rows = cursor.fetchmany(max_rows + 1)
            cols = [d[0] for d in cursor.description or ()]
        finally:
            cursor.close()
    finally:
        conn.set_progress_handler(None, 0)
    return cols, rows


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return format_number(value)
    text = "NULL" if value is None else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def render_result(cols: list[str], rows: list[tuple], max_rows: int = MAX_ROWS) -> str:
    """A compact text table: a header line, then one `a | b` line per row."""
    if not cols:
        return "The statement returned no result columns."
    lines = [" | ".join(cols)] + [" | ".join(_cell(v) for v in r) for r in rows[:max_rows]]
    if len(rows) > max_rows:
        lines.append(f"... more than {max_rows} rows; refine the query or add LIMIT.")
    elif not rows:
        lines.append("(no rows)")
    return "\n".join(lines)


def _normalize_answer(text: str) -> str:
    return " ".join(text.strip().strip("'\"` .").split()).casefold()


def answers_match(given: str, gold: Any) -> bool:
    """Numeric gold: within relative 1e-6; text gold: equal after trimming and casefolding."""
    if isinstance(gold, int | float):
        value = parse_number(given)
        return value is not None and math.isclose(value, gold, rel_tol=1e-6, abs_tol=1e-9)
    return _normalize_answer(given) == _normalize_answer(str(gold))


def gold_answer(conn: sqlite3.Connection, task: dict[str, Any]) -> tuple[str, str, Any]:
    """(question, gold SQL, gold value); ValueError if the task has no unique answer."""
    name = task.get("template")
    if name not in TEMPLATES:
        raise ValueError(f"SQL task template={name!r} is unknown; known: {sorted(TEMPLATES)}")
    question, sql, tie_sql = TEMPLATES[name]
    params = task.get("params", {})
    gold_sql = _fill(sql, params)
    _, rows = run_query(conn, gold_sql)
    if not rows or rows[0][0] is None:
        raise ValueError(f"SQL task {task!r} has an empty gold answer")
    if tie_sql:
        _, top = run_query(conn, _fill(tie_sql, params))
        if len(top) > 1 and top[0][0] == top[1][0]:
            raise ValueError(f"SQL task {task!r} has a tied gold answer")
    try:
        text = question.format(**params)
    except KeyError as e:
        raise ValueError(f"SQL task params {params!r} lack {e} for template {name!r}") from e
    return text, gold_sql, rows[0][0]


def _draw_params(rng: random.Random, name: str, rows: dict[str, list[tuple]]) -> dict[str, Any]:
    depts = [r[1] for r in rows["departments"]]
    pick = {
        "dept": lambda: rng.choice(depts),
        "city": lambda: rng.choice(sorted({r[2] for r in rows["departments"]})),
        "customer": lambda: rng.choice(_CUSTOMERS.split()),
        "title": lambda: rng.choice(_TITLES),
        "status": lambda: rng.choice(_STATUSES),
        "year": lambda: rng.randint(2010, 2022),
        "salary": lambda: rng.randrange(10, 31) * 5000,
    }
    fields = sorted(set(re.findall(r"\{(\w+)", TEMPLATES[name][0])))
    return {f: pick[f]() for f in fields}


class SQLEnv(TextEnv):
    """Query a generated SQLite database with `sql[...]`, then `answer[...]` the question."""

    env_id = "arborl/SQL-v0"
    description = "Answer a question about a company database by querying it with SQLite."
    action_format = "sql[<SELECT query>] or answer[<value>]"
    default_max_turns = 10
    _state_attrs = ("question", "gold_sql", "gold", "queries", "answered", "correct")

    def __init__(
        self,
        num_employees: int = 40,
        num_orders: int = 80,
        templates: list[str] | tuple[str, ...] | None = None,
        split: str = "train",
        max_turns: int | None = None,
    ) -> None:
        """`num_employees` (10..320) and `num_orders` (10..2000) size the database;
        `templates` restricts the question families (default: all)."""
        super().__init__(split=split, max_turns=max_turns)
        if not 10 <= int(num_employees) <= 320:
            raise ValueError(f"num_employees={num_employees!r} must be in 10..320")
        if not 10 <= int(num_orders) <= 2000:
            raise ValueError(f"num_orders={num_orders!r} must be in 10..2000")
        names = chosen_templates(templates, TEMPLATES)
        self.num_employees, self.num_orders, self.templates = (
            int(num_employees),
            int(num_orders),
            names,
        )
        self.question, self.gold_sql, self.gold = "", "", None
        self.queries: list[str] = []  # normalized text of queries that ran
        self.answered = self.correct = False
        self._conn: sqlite3.Connection | None = None
        self._conn_task: str | None = None

    # --- tasks and the database -----------------------------------------------------
    def _draw(self, rng: random.Random) -> dict[str, Any]:
        task = {
            "db_seed": rng.randrange(1_000_000),
            "num_employees": self.num_employees,
            "num_orders": self.num_orders,
            "template": rng.choice(self.templates),
        }
        rows = generate_rows(task["db_seed"], self.num_employees, self.num_orders)
        task["params"] = _draw_params(rng, task["template"], rows)
        return task

    def _sample_task(self, rng: random.Random, split: str) -> dict[str, Any]:
        # Split first (cheap hash), then build the database only for the survivors.
        for _ in range(100):
            task = sample_in_split(rng, split, self._draw)
            conn = build_db(task)
            try:
                gold_answer(conn, task)
                return task
            except ValueError:
                continue  # empty or tied answer: draw again
            finally:
                conn.close()
        raise RuntimeError(f"100 SQL draws in a row had no unique answer ({self.templates})")

    def _task_id(self, task: dict[str, Any]) -> str:
        return task_id_of(task)

    def _db(self) -> sqlite3.Connection:
        """The connection for the current task, rebuilt if the task changed (e.g. restore)."""
        key = self._task_id(self.task)
        if self._conn is None or self._conn_task != key:
            if self._conn is not None:
                self._conn.close()
            self._conn, self._conn_task = build_db(self.task), key
        return self._conn

    def _start(self, task: dict[str, Any]) -> str:
        for key in ("db_seed", "num_employees", "num_orders", "template"):
            if key not in task:
                raise ValueError(f"SQL task {task!r} lacks field {key!r}")
        self.question, self.gold_sql, self.gold = gold_answer(self._db(), task)
        self.queries, self.answered, self.correct = [], False, False
        return "Tables:\n" + "\n".join(SCHEMA) + f"\nQuestion: {self.question}"

    def _instruction(self, task: dict[str, Any]) -> str:
        return (
            f"{self.description}\nTables:\n" + "\n".join(SCHEMA) + f"\nQuestion: {self.question}\n"
            f"Actions: sql[<query>] runs one read-only SQLite query and shows up to {MAX_ROWS} "
            "rows; answer[<value>] submits the answer (a number or a name) and ends the "
            "episode. Reward 1 if the answer is correct."
        )

    # --- acting -----------------------------------------------------------------------
    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        match = re.match(r"^\s*(sql|answer)\s*\[(.*)\]\s*$", action, re.IGNORECASE | re.DOTALL)
        if match is None:
            return (
                f"Invalid action {action[:80]!r}: use sql[<query>] or answer[<value>].",
                0.0,
                False,
                False,
            )
        verb, arg = match.group(1).lower(), match.group(2).strip()
        if verb == "answer":
            if not arg:
                return "Invalid answer: it is empty; write answer[<value>].", 0.0, False, False
            self.answered = True
            self.correct = answers_match(arg, self.gold)
            verdict = "correct" if self.correct else "wrong"
            return f"Answer {arg[:60]!r} is {verdict}.", float(self.correct), True, True
        return self._run_sql(arg)

    def _run_sql(self, query: str) -> tuple[str, float, bool, bool]:
        if not query:
            return "SQL error: the query is empty.", 0.0, False, False
        if len(query) > MAX_QUERY_CHARS:
            return f"SQL error: the query exceeds {MAX_QUERY_CHARS} characters.", 0.0, False, False
        try:
            cols, rows = run_query(self._db(), query)
        except sqlite3.OperationalError as e:
            if "interrupt" in str(e):
                return (
                    f"SQL error: the query was stopped after {MAX_VM_STEPS:,} steps "
                    f"or {MAX_QUERY_SECONDS:g} s; simplify it.",
                    0.0,
                    False,
                    False,
                )
            return f"SQL error: {_explain(e)}", 0.0, False, False
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as e:
            return f"SQL error: {_explain(e)}", 0.0, False, False
        self.queries.append(" ".join(query.split()))
        return render_result(cols, rows), 0.0, False, True

    def _anchor(self) -> tuple:
        # The database never changes; what differs is which results have been revealed.
        return (self._task_id(self.task), tuple(sorted(set(self.queries))), self.answered)

    def _won(self) -> bool:
        return self.correct

    def oracle_action(self) -> str:
        """Run the gold query once, then answer with its value."""
        if " ".join(self.gold_sql.split()) not in self.queries:
            return f"sql[{self.gold_sql}]"
        gold = format_number(self.gold) if isinstance(self.gold, int | float) else self.gold
        return f"answer[{gold}]"

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn, self._conn_task = None, None
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        # sqlite connections cannot be pickled or deep-copied; rebuild lazily instead.
        state = self.__dict__.copy()
        state["_conn"], state["_conn_task"] = None, None
        return state


def _explain(error: Exception) -> str:
    text = str(error) or type(error).__name__
    if "not authorized" in text or "prohibited" in text or "readonly" in text:
        return f"{text} (only read-only SELECT queries are allowed)"
    return text[:200]
