"""Fuzz of the data files arborl reads (issue 19, requirement 7): curate sources in every
format and training task files. Hypothesis mutates real fixture rows (a field replaced by
a value of another JSON type, NaN, a string such as "false", a deep nest) and appends
random JSON lines; the readers must never crash, and every input row is either read or
counted as malformed with its file, row and field. Bounded: a fixed number of examples."""

import json
import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborl.curate.config import SourceConfig
from arborl.curate.read import ReadResult, UnreadableInput, iter_file
from arborl.data.tasks import read_task_seeds

FIXTURES = Path(__file__).parent / "fixtures"
SOURCES = ["arborl_maze.jsonl", "sharegpt_web_train.jsonl", "openai_math.jsonl"]


def _read_file(path, source, strict, out):
    out.records += iter_file(path, source, strict, out)


def _json_rows(name: str) -> list:
    """The fixture's lines that are JSON objects (the fixtures hold planted bad lines too)."""
    rows = []
    for line in (FIXTURES / name).read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


ROWS = {name: _json_rows(name) for name in SOURCES}

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=8),
    st.sampled_from(["false", "true", "1", "NaN", "", "\ud800"]),
    st.floats(allow_nan=True, allow_infinity=True),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


def _paths(obj, prefix=()):
    """Every (path, value) inside a JSON object, to pick a field to corrupt."""
    yield prefix, obj
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for k, v in items:
        yield from _paths(v, (*prefix, k))


def _replace(obj, path, new):
    if not path:
        return new
    obj = json.loads(json.dumps(obj))  # a copy
    target = obj
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = new
    return obj


def _reject(constant: str):
    raise ValueError(constant)


def _strict_json(line: str):
    """`line` as strict JSON (no NaN/Infinity, encodable as UTF-8), else None."""
    try:
        line.encode("utf-8")
        return json.loads(line, parse_constant=_reject)
    except ValueError:
        return None


def _dump(row) -> str:
    # json.dumps writes NaN/Infinity (not strict JSON) and lone surrogates as escapes:
    # both are what a careless producer writes, and the readers must cope.
    return json.dumps(row)


@st.composite
def mutated_file(draw):
    name = draw(st.sampled_from(SOURCES))
    rows = ROWS[name]
    out = []
    for row in draw(st.lists(st.sampled_from(rows), min_size=1, max_size=4)):
        if draw(st.booleans()):
            paths = [p for p, _ in _paths(row) if p]
            path = draw(st.sampled_from(paths))
            row = _replace(row, path, draw(values))
        out.append(_dump(row))
    out += [_dump(v) for v in draw(st.lists(values, max_size=2))]
    if draw(st.booleans()):
        out.append(draw(st.sampled_from(["{not json", "[1, 2", "\x00\x01"])))
    return name, out


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(mutated_file(), st.sampled_from(["auto", "arborl", "sharegpt", "openai"]))
def test_curate_reader_accounts_for_every_row_and_never_crashes(tmp_path_factory, case, fmt):
    name, lines = case
    path = tmp_path_factory.mktemp("fuzz") / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    out = ReadResult()
    try:
        _read_file(path, SourceConfig(path=str(path), format=fmt), strict=False, out=out)
    except UnreadableInput:
        # By design only a file with no decodable row fails the run (exit 1): every line
        # here must then be junk, NaN/Infinity or a lone surrogate (not strict UTF-8 JSON).
        assert not any(isinstance(_strict_json(line), dict) for line in lines), lines
        return
    assert len(out.records) + len(out.malformed) == len(lines)
    for bad in out.malformed:
        assert bad.file and bad.row >= 1 and bad.field and bad.reason
    for rec in out.records:  # what was read has the types the rest of curation assumes
        t = rec.traj
        assert isinstance(t.won, bool)
        for s in t.steps:
            assert isinstance(s.action, str) and isinstance(s.observation, str)
            assert isinstance(s.reward, float) and math.isfinite(s.reward)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(values, min_size=1, max_size=4), st.integers(0, 3))
def test_task_file_reader_rejects_bad_rows_with_a_located_error(tmp_path_factory, extras, good):
    rows = [{"data_source": "arborl/Maze-v0", "extra_info": {"seed": i}} for i in range(good)]
    rows += [
        {"data_source": "arborl/Maze-v0", "extra_info": v} if i % 2 else v
        for i, v in enumerate(extras)
    ]
    path = tmp_path_factory.mktemp("tasks") / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    try:
        seeds = read_task_seeds(path, "arborl/Maze-v0", "train")
    except ValueError as e:  # located (file, row) or naming the file: never another error
        assert str(path) in str(e) or "tasks.jsonl" in str(e), e
        return
    assert all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    assert seeds[:good] == list(range(good))


def test_fuzz_starts_from_rows_that_read():
    # The mutations start from real rows of each format, most of which read cleanly.
    for name in SOURCES:
        assert len(ROWS[name]) >= 2, name
        out = ReadResult()
        path = FIXTURES / name
        _read_file(path, SourceConfig(path=str(path)), strict=False, out=out)
        assert out.records, name
