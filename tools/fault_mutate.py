"""The fault suite measures its own strength (`make test-faults-mutate`).

For each scenario of `tests/conftest.py` FAULT_SCENARIOS, and each of its mutations in
`tools/fault_mutations.py` (the edit that removes the protection it guards), this:

1. extracts the committed tree (`git archive <ref>`, HEAD by default) into a temporary
   folder; the real tree is never touched;
2. applies the mutation there, failing loudly if its old text is not in the file exactly
   once (a refactor must update the table, not silently skip a scenario);
3. runs that scenario's fault tests against the copy (`PYTHONPATH=<copy>`, this
   interpreter, `-m fault` and the node ids of the tests marked with the scenario);
4. expects at least one of them to FAIL: the suite then cannot report the scenario held
   on a build without its protection.

It ends with "fault mutations: N/M scenarios held, each shown to catch its regression",
or names each mutation that was NOT caught. Exit status 0 when every mutation run was
caught (a scenario skipped for a missing need is listed with the reason), 1 otherwise.

    python tools/fault_mutate.py                       # all (an hour or more on 2 cores)
    python tools/fault_mutate.py --max-cost 30         # those whose tests take < 30 s
    python tools/fault_mutate.py --scenario "NaN rewards" --scenario "failed request"
    python tools/fault_mutate.py --list                # the table, no runs
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_mutations import MUTATIONS, Mutation  # noqa: E402


class MutationError(RuntimeError):
    """A mutation that cannot be applied: the table is stale."""


def scenario_names(root: Path) -> list[str]:
    """FAULT_SCENARIOS' names, read from `root`/tests/conftest.py without importing it."""
    tree = ast.parse((root / "tests" / "conftest.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "FAULT_SCENARIOS" for t in node.targets
        ):
            return list(ast.literal_eval(node.value).keys())
    raise MutationError(f"{root}/tests/conftest.py defines no FAULT_SCENARIOS")


def _fault_args(node: ast.expr) -> list[str]:
    """The scenario names of `pytest.mark.fault("a", "b")` (or a list of marks)."""
    if isinstance(node, ast.List | ast.Tuple):
        return [s for elt in node.elts for s in _fault_args(elt)]
    is_fault = (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "fault"
    )
    if not is_fault:
        return []
    return [a.value for a in node.args if isinstance(a, ast.Constant)]


def scenario_tests(root: Path) -> dict[str, list[str]]:
    """{scenario: node ids of its tests}, from the fault marks in `root`/tests. A module's
    `pytestmark` marks each test of the file that has no fault mark of its own (pytest's
    `get_closest_marker`, which tests/conftest.py reads, takes the test's own first)."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        whole = [
            s
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
            for s in _fault_args(node.value)
        ]
        for node, prefix in _test_functions(tree):
            own = [s for d in node.decorator_list for s in _fault_args(d)]
            for s in own or whole:
                found.setdefault(s, []).append(f"{rel}::{prefix}{node.name}")
    return found


def _test_functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith("test"):
                yield node, ""
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef) and sub.name.startswith(
                    "test"
                ):
                    yield sub, f"{node.name}::"


def apply(mutation: Mutation, root: Path) -> None:
    """Edit `root`/`mutation.path`; MutationError unless its old text occurs exactly once."""
    path = root / mutation.path
    if not path.is_file():
        raise MutationError(
            f"mutation for {mutation.scenario!r}: {mutation.path} does not exist; the "
            "protection moved: update tools/fault_mutations.py"
        )
    text = path.read_text()
    count = text.count(mutation.old)
    if count != 1:
        raise MutationError(
            f"mutation for {mutation.scenario!r} ({mutation.protection}): its old text occurs "
            f"{count} times in {mutation.path}, not once; the code changed: update "
            f"tools/fault_mutations.py. Old text:\n{mutation.old}"
        )
    path.write_text(text.replace(mutation.old, mutation.new))


def check_table(root: Path) -> list[str]:
    """What is wrong with the table against the tree at `root` (nothing: []): a scenario
    without a mutation or a mutation of no scenario, an old text not in its file exactly
    once, a mutation that changes nothing, a scenario with no marked test."""
    names, tests = scenario_names(root), scenario_tests(root)
    have = {m.scenario for m in MUTATIONS}
    problems = [f"no mutation for scenario {s!r}" for s in names if s not in have]
    problems += [f"mutation for {s!r}, not a FAULT_SCENARIOS name" for s in have - set(names)]
    problems += [f"no test is marked with scenario {s!r}" for s in names if not tests.get(s)]
    for m in MUTATIONS:
        path = root / m.path
        count = path.read_text().count(m.old) if path.is_file() else 0
        if count != 1:
            problems.append(f"{m.scenario!r}: old text occurs {count} times in {m.path}")
        if m.old == m.new or not m.protection:
            problems.append(f"{m.scenario!r}: the mutation changes nothing or names no protection")
    return problems


def extract(ref: str, dest: Path) -> None:
    """The tree of `ref` into `dest` (git archive | tar -x)."""
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", ref], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise MutationError(f"git archive {ref} failed (exit {archive.returncode})")


@dataclass
class Outcome:
    """How one mutation's run ended."""

    verdict: str
    """'caught', 'NOT caught', 'skipped' or 'error'."""
    detail: str
    failed: list[str] = field(default_factory=list)


def _junit(path: Path) -> tuple[list[str], list[str], list[str]]:
    """(passed, failed with their messages, skip reasons) of a JUnit XML report."""
    passed, failed, skipped = [], [], []
    if not path.is_file():
        return passed, failed, skipped
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            why = (bad.get("message") or "").replace("\n", " ")
            failed.append(f"{name}: {why[:160]}")
        elif (skip := case.find("skipped")) is not None:
            skipped.append(skip.get("message", "skipped"))
        else:
            passed.append(name)
    return passed, failed, skipped


def run_tests(copy: Path, nodeids: list[str], timeout_s: int, log: Path) -> Outcome:
    """The tests `nodeids` against `copy`; caught when at least one failed."""
    report = log.with_suffix(".xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", "-m", "fault",
           f"--timeout={timeout_s}", f"--junitxml={report}", *nodeids]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=copy, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    passed, failed, skipped = _junit(report)
    n = len(passed) + len(failed) + len(skipped)
    if rc == 1 and failed:
        return Outcome("caught", f"{len(failed)}/{n} tests failed", failed)
    if rc == 0 and passed:
        return Outcome("NOT caught", f"all {len(passed)} tests passed ({n - len(passed)} skipped)")
    if rc in (0, 5) and skipped and not passed:
        return Outcome("skipped", f"every test skipped: {sorted(set(skipped))[0]}")
    tail = "\n".join(log.read_text().splitlines()[-15:])
    return Outcome("error", f"pytest exit {rc} (collection or usage error):\n{tail}")


def missing_need(m: Mutation) -> str | None:
    for module in m.needs:
        if importlib.util.find_spec(module) is None:
            return f"needs the Python module {module!r}, not installed here"
    return None


def check_one(m: Mutation, tests: list[str], ref: str, work: Path, k: int) -> Outcome:
    """Copy the tree, apply `m`, run `tests`."""
    if not tests:
        return Outcome("error", f"no test is marked @pytest.mark.fault({m.scenario!r})")
    if (why := missing_need(m)) is not None:
        return Outcome("skipped", why)
    copy = work / f"m{k}"
    extract(ref, copy)
    apply(m, copy)
    return run_tests(copy, tests, m.timeout_s, work / f"m{k}.log")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", action="append", default=[], metavar="NAME",
                   help="run only this scenario (repeatable)")  # fmt: skip
    p.add_argument("--max-cost", type=float, default=None, metavar="S",
                   help="run only scenarios whose tests take under S seconds (cost_s)")  # fmt: skip
    p.add_argument("--ref", default="HEAD", help="the commit to copy (default HEAD)")
    p.add_argument("--keep", action="store_true", help="keep the copies and logs")
    p.add_argument("--list", action="store_true", help="print the table and exit")
    return p.parse_args(argv)


def select(args: argparse.Namespace, names: list[str]) -> list[Mutation]:
    unknown = [s for s in args.scenario if s not in names]
    if unknown:
        raise SystemExit(f"error: --scenario {unknown} not in FAULT_SCENARIOS {names}")
    chosen = [m for m in MUTATIONS if not args.scenario or m.scenario in args.scenario]
    if args.max_cost is not None:
        chosen = [m for m in chosen if m.cost_s < args.max_cost]
    return chosen


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    names = scenario_names(ROOT)
    if problems := check_table(ROOT):
        raise MutationError("tools/fault_mutations.py is stale:\n  " + "\n  ".join(problems))
    chosen = select(args, names)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.scenario:34} {m.cost_s:6.0f} s  {m.path}: {m.protection}")
        return 0
    tests = scenario_tests(ROOT)
    outcomes: list[tuple[Mutation, Outcome]] = []
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="arborl-mutate-"))
    try:
        for k, m in enumerate(chosen, 1):
            print(f"[{k}/{len(chosen)}] {m.scenario}: without '{m.protection}' ({m.path}), "
                  f"{len(tests.get(m.scenario, []))} test ids ...", flush=True)  # fmt: skip
            t0 = time.monotonic()
            outcome = check_one(m, tests.get(m.scenario, []), args.ref, work, k)
            outcomes.append((m, outcome))
            print(f"      {outcome.verdict}: {outcome.detail} ({time.monotonic() - t0:.0f} s, "
                  f"{time.monotonic() - start:.0f} s in all)", flush=True)  # fmt: skip
            for name in outcome.failed[:5]:
                print(f"        failed: {name}")
    finally:
        if args.keep:
            print(f"copies and logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return report(outcomes, names)


def report(outcomes: list[tuple[Mutation, Outcome]], names: list[str]) -> int:
    """The summary lines; 0 when no mutation run escaped its tests."""
    by: dict[str, list[str]] = {}
    for m, o in outcomes:
        by.setdefault(m.scenario, []).append(o.verdict)
    shown = [s for s in names if s in by and all(v == "caught" for v in by[s])]
    print(f"fault mutations: {len(shown)}/{len(names)} scenarios held, each shown to catch "
          "its regression")  # fmt: skip
    bad = [(m, o) for m, o in outcomes if o.verdict in ("NOT caught", "error")]
    for m, o in bad:
        print(f"  {o.verdict}: {m.scenario}: without '{m.protection}' ({m.path}): {o.detail}")
    for m, o in outcomes:
        if o.verdict == "skipped":
            print(f"  skipped: {m.scenario}: {o.detail}")
    not_run = [s for s in names if s not in by]
    if not_run:
        print(f"  not run this time ({len(not_run)}): {', '.join(not_run)}")
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MutationError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
