"""The mutation table of the fault suite (tools/fault_mutations.py) is current: every
scenario of FAULT_SCENARIOS has a mutation, each mutation's old text is in its file exactly
once, and every scenario has marked tests. Cheap: it reads files and runs no test; the
mutation runs themselves are `make test-faults-mutate` (tools/fault_mutate.py)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _tool():
    path = ROOT / "tools" / "fault_mutate.py"
    spec = importlib.util.spec_from_file_location("fault_mutate", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_every_scenario_has_a_current_mutation(fault_scenarios):
    tool = _tool()
    assert tool.check_table(ROOT) == []
    per: dict[str, list[str]] = {}
    for m in tool.MUTATIONS:
        per.setdefault(m.scenario, []).append(m.protection)
    assert sorted(per) == sorted(fault_scenarios)
    # one mutation each; a scenario guarded by independent mechanisms has one per mechanism
    # (review 3 #14: each cancellation path of "abandoned client" must be caught alone)
    assert {s: len(p) for s, p in per.items() if len(p) != 1} == {"abandoned client": 2}
    assert all(len(set(p)) == len(p) for p in per.values())


def test_a_stale_mutation_is_a_loud_error(tmp_path):
    tool = _tool()
    m = tool.MUTATIONS[0]
    (tmp_path / m.path).parent.mkdir(parents=True)
    (tmp_path / m.path).write_text("refactored away\n")
    try:
        tool.apply(m, tmp_path)
    except tool.MutationError as e:
        assert "occurs 0 times" in str(e) and m.path in str(e) and m.scenario in str(e)
    else:
        raise AssertionError("a mutation whose old text is gone was applied")
    (tmp_path / m.path).write_text(m.old + m.old)  # twice: ambiguous
    try:
        tool.apply(m, tmp_path)
    except tool.MutationError as e:
        assert "occurs 2 times" in str(e)
    else:
        raise AssertionError("an ambiguous mutation was applied")


def test_the_scenario_tests_are_found_as_pytest_reads_the_marks():
    tests = _tool().scenario_tests(ROOT)
    nan = tests["NaN rewards"]
    # the file's pytestmark covers its tests but not those with a fault mark of their own
    assert (
        "tests/train/test_nonfinite_rewards.py::test_a_nonfinite_env_reward_makes_its_episode_an_env_error"
        in nan
    )
    assert not any("past_the_bound" in t or "past_float" in t for t in nan)
    assert (
        "tests/envs/test_modes.py::test_failed_call_ends_only_its_episode" in tests["hanging env"]
    )
    assert (
        "tests/envs/test_modes.py::test_failed_call_ends_only_its_episode" in tests["raising env"]
    )
