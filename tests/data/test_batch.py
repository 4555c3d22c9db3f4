"""Property tests for `Batch`: every row operation keeps tensors, meta and info in step,
round trips are exact, and every mistake raises an error that names the key."""

import itertools
import pickle

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborl.data import Batch

SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# --- strategies -------------------------------------------------------------------------
_text = st.text(max_size=5)
_int = st.integers(-(2**40), 2**40)
_float = st.floats(allow_nan=True, allow_infinity=True)
_anchor = st.tuples(st.integers(0, 5), _text)  # GiGPO anchors: hashable tuples
_META_VALUES = {
    "str": _text,
    "int": _int,
    "float": _float,
    "tuple": _anchor,
    "mixed": st.one_of(_text, _int, _float, _anchor),
}
_json_leaf = st.one_of(st.none(), st.booleans(), _int, st.floats(allow_nan=False), _text)
_info_value = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(_text, inner, max_size=3),
    ),
    max_leaves=6,
)


def _make_tensor(kind: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "int":
        return torch.randint(-1000, 1000, shape, generator=g)
    if kind == "float":
        return torch.randn(shape, generator=g)
    return torch.rand(shape, generator=g) < 0.5


@st.composite
def batches(draw, min_rows: int = 1, max_rows: int = 20) -> Batch:
    n = draw(st.integers(min_rows, max_rows))
    tensors = {}
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["int", "float", "bool"]))
        trailing = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        tensors[f"t{i}_{kind}"] = _make_tensor(kind, (n, *trailing), draw(st.integers(0, 2**16)))
    meta = {}
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(sorted(_META_VALUES)))
        meta[f"m{i}_{kind}"] = draw(st.lists(_META_VALUES[kind], min_size=n, max_size=n))
    info = draw(st.dictionaries(_text, _info_value, max_size=3))
    return Batch(tensors, meta, info)


def _assert_same_types(a: Batch, b: Batch) -> None:
    """`==` compares values; also check that tuples stayed tuples and dtypes held."""
    for k, v in a.meta.items():
        assert b.meta[k].dtype == v.dtype, k
        for x, y in zip(v, b.meta[k]):
            assert type(x) is type(y), (k, x, y)
            if isinstance(y, tuple):
                hash(y)


# --- row operations -----------------------------------------------------------------------
@SETTINGS
@given(b=batches(), n=st.integers(1, 25))
def test_concat_of_chunk_is_identity(b: Batch, n: int) -> None:
    parts = b.chunk(n)
    assert len(parts) == min(n, len(b))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert Batch.concat(parts) == b


@SETTINGS
@given(b=batches(), k=st.integers(1, 25))
def test_concat_of_split_is_identity(b: Batch, k: int) -> None:
    parts = b.split(k)
    assert all(len(p) == k for p in parts[:-1]) and 1 <= len(parts[-1]) <= k
    assert Batch.concat(parts) == b


@SETTINGS
@given(b=batches())
def test_save_load_round_trip(b: Batch, tmp_path) -> None:
    path = tmp_path / f"b{len(list(tmp_path.iterdir()))}"
    loaded = Batch.load(b.save(path))
    assert loaded == b
    assert loaded.info == b.info  # tuples inside info stay tuples: (1,) != [1]
    _assert_same_types(b, loaded)
    for k, v in b.tensors.items():
        assert loaded.tensors[k].dtype == v.dtype


@SETTINGS
@given(b=batches())
def test_pickle_round_trip(b: Batch) -> None:
    loaded = pickle.loads(pickle.dumps(b))
    assert loaded == b
    _assert_same_types(b, loaded)


def test_info_with_arrays_and_nan_round_trips(tmp_path) -> None:
    info = {"hist": np.arange(3), "loss": float("nan"), "anchors": [(0, "a")]}
    b = Batch.from_dict({"x": torch.arange(2)}, info=info)
    loaded = Batch.load(b.save(tmp_path / "b"))
    assert loaded == b and isinstance(loaded.info["hist"], np.ndarray)
    assert loaded.info["anchors"] == [(0, "a")]
    assert b != Batch.from_dict({"x": torch.arange(2)}, info={**info, "hist": np.arange(4)})


def test_pickle_keeps_bfloat16() -> None:
    b = Batch.from_dict({"logp": torch.tensor([-0.5, -1.25, -3.0]).bfloat16()})
    loaded = pickle.loads(pickle.dumps(b))
    assert loaded.tensors["logp"].dtype == torch.bfloat16
    assert loaded == b


@SETTINGS
@given(b=batches(), k=st.integers(1, 8))
def test_unpad_undoes_pad_to_multiple(b: Batch, k: int) -> None:
    padded, pad = b.pad_to_multiple(k)
    assert len(padded) % k == 0 and 0 <= pad < k
    assert len(padded) == len(b) + pad
    # The padding repeats the first rows, so every worker sees real samples.
    for j in range(pad):
        assert padded[len(b) + j] == b[j % len(b)]
    assert padded.unpad(pad) == b


@SETTINGS
@given(b=batches(max_rows=8), n=st.integers(1, 4))
def test_repeat_row_order(b: Batch, n: int) -> None:
    rows = range(len(b))
    interleaved = b.repeat(n, interleave=True)  # a a b b
    tiled = b.repeat(n, interleave=False)  # a b a b
    assert len(interleaved) == len(tiled) == n * len(b)
    assert interleaved == Batch.concat([b[i] for i in rows for _ in range(n)])
    assert tiled == Batch.concat([b[i] for _ in range(n) for i in rows])


def test_repeat_row_order_by_hand() -> None:
    b = Batch.from_dict({"x": torch.tensor([10, 20])}, meta={"id": ["a", "b"]})
    assert b.repeat(2, interleave=True)["id"].tolist() == ["a", "a", "b", "b"]
    assert b.repeat(2, interleave=False)["x"].tolist() == [10, 20, 10, 20]


@SETTINGS
@given(data=st.data(), b=batches())
def test_reorder_then_inverse_is_identity(data, b: Batch) -> None:
    perm = data.draw(st.permutations(range(len(b))))
    inverse = np.argsort(perm).tolist()
    shuffled = b.reorder(perm)
    for j, i in enumerate(perm):
        assert shuffled[j] == b[i]
    assert shuffled.reorder(inverse) == b
    assert b.reorder(torch.tensor(perm)) == shuffled


@SETTINGS
@given(data=st.data(), b=batches())
def test_indexing_kinds_agree(data, b: Batch) -> None:
    n = len(b)
    i = data.draw(st.integers(-n, n - 1))
    row = b[i]
    mask = torch.zeros(n, dtype=torch.bool)
    mask[i] = True
    assert len(row) == 1
    assert row == b[i % n : i % n + 1] == b[torch.tensor([i])] == b[mask] == b[np.int64(i)]

    chosen = sorted(data.draw(st.sets(st.integers(0, n - 1))))
    mask = torch.zeros(n, dtype=torch.bool)
    mask[chosen] = True
    by_rows = Batch.concat([b[j] for j in chosen]) if chosen else b[:0]
    assert b[torch.tensor(chosen, dtype=torch.long)] == b[mask] == b[chosen] == by_rows
    assert b[mask.numpy()] == by_rows


def test_indexing_with_an_empty_list_gives_an_empty_batch() -> None:
    b = Batch.from_dict({"x": torch.arange(3)}, meta={"s": ["a", "b", "c"]})
    assert len(b[[]]) == 0 and b[[]] == b[:0]


# --- key operations -------------------------------------------------------------------------
def _small() -> Batch:
    return Batch.from_dict(
        {"x": torch.arange(4), "y": torch.ones(4, 2)},
        meta={"s": ["a", "b", "c", "d"], "anchor": [(0, "u"), (1, "u"), (0, "v"), (1, "v")]},
        info={"step": 3},
    )


def test_string_index_select_pop_union() -> None:
    b = _small()
    assert torch.equal(b["x"], torch.arange(4))
    assert b["s"].tolist() == ["a", "b", "c", "d"]
    assert b.meta["anchor"].dtype == object and b["anchor"][2] == (0, "v")
    assert "x" in b and "nope" not in b

    sel = b.select("x", "s")
    assert sel.keys() == ["x", "s"] and sel.info == {"step": 3}
    popped = b.pop("y", "anchor")
    assert popped.keys() == ["y", "anchor"] and b.keys() == ["x", "s"]

    merged = b.union(popped)
    assert set(merged.keys()) == {"x", "y", "s", "anchor"}
    assert merged.union(_small()) == _small()  # overlapping keys with equal values are fine


def test_setitem_routes_tensors_and_meta() -> None:
    b = _small()
    b["z"] = torch.zeros(4)
    b["tag"] = ["p", "q", "r", "s"]
    assert "z" in b.tensors and "tag" in b.meta
    b["y"] = b["x"]  # an alias of another field still saves (safetensors forbids sharing)
    with pytest.raises(ValueError, match=r"'w' has length 3, batch has length 4"):
        b["w"] = torch.zeros(3)


def test_alias_fields_save(tmp_path) -> None:
    b = _small()
    b["x_ref"] = b["x"]
    assert Batch.load(b.save(tmp_path / "b")) == b


def test_to_device_keeps_everything() -> None:
    b = _small()
    moved = b.to("cpu")
    assert moved == b and moved.info == b.info
    if torch.cuda.is_available():
        on_gpu = b.to("cuda")
        assert on_gpu["x"].is_cuda and on_gpu.to("cpu") == b


# --- errors ---------------------------------------------------------------------------------
def test_mismatched_lengths_name_key_and_sizes() -> None:
    with pytest.raises(ValueError) as e:
        Batch.from_dict({"input_ids": torch.zeros(3, 5), "reward": torch.zeros(4)})
    msg = str(e.value)
    assert "tensors['reward'] has length 4" in msg and "tensors['input_ids'] has length 3" in msg

    with pytest.raises(ValueError, match=r"meta\['task_id'\] has length 2.*tensors\['x'\].* 3"):
        Batch.from_dict({"x": torch.zeros(3)}, meta={"task_id": ["a", "b"]})


def test_bad_field_values() -> None:
    with pytest.raises(ValueError, match=r"tensors\['x'\] is a scalar"):
        Batch({"x": torch.tensor(1.0)})
    with pytest.raises(TypeError, match=r"meta\['m'\] is a torch.Tensor"):
        Batch(meta={"m": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"both in tensors and meta"):
        Batch({"k": torch.zeros(2)}, {"k": ["a", "b"]})


def test_concat_errors_name_the_key() -> None:
    a = Batch.from_dict({"x": torch.zeros(2, dtype=torch.float32), "y": torch.zeros(2)})
    b = Batch.from_dict({"x": torch.zeros(2, dtype=torch.int64), "y": torch.zeros(2)})
    with pytest.raises(TypeError, match=r"tensors\['x'\] has dtypes.*float32.*int64"):
        Batch.concat([a, b])

    with pytest.raises(KeyError, match=r"batch 1 has fields \['x'\].*batch 0 has \['x', 'y'\]"):
        Batch.concat([a, a.select("x")])

    wide = Batch.from_dict({"x": torch.zeros(2, 3), "y": torch.zeros(2)})
    narrow = Batch.from_dict({"x": torch.zeros(2, 5), "y": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"tensors\['x'\] has trailing shapes.*pad"):
        Batch.concat([wide, narrow])

    with pytest.raises(ValueError, match="at least one batch"):
        Batch.concat([])


def test_select_unknown_key_names_it_and_lists_fields() -> None:
    b = _small()
    with pytest.raises(KeyError, match=r"no field\(s\) \['nope'\].*fields are \['x', 'y', 's'"):
        b.select("x", "nope")
    with pytest.raises(KeyError, match=r"no field 'nope'.*fields are"):
        b["nope"]


def test_union_conflicts_name_the_key() -> None:
    b = _small()
    other = _small()
    other.tensors["x"] = torch.arange(4) + 1
    with pytest.raises(ValueError, match=r"tensors\['x'\] differ"):
        b.union(other)

    other = _small()
    other.meta["s"] = np.array(["a", "b", "c", "zzz"], dtype=object)
    with pytest.raises(ValueError, match=r"meta\['s'\] differ"):
        b.union(other)

    other = Batch(_small().tensors, info={"step": 4})
    with pytest.raises(ValueError, match=r"info\['step'\] differ \(3 vs 4\)"):
        b.union(other)

    with pytest.raises(ValueError, match=r"lengths differ \(4 vs 2\)"):
        b.union(b[:2].select("x"))


def test_row_errors() -> None:
    b = _small()
    with pytest.raises(IndexError, match=r"bool mask has shape \(3,\), batch has length 4"):
        b[torch.tensor([True, False, True])]
    with pytest.raises(IndexError, match="row 4 out of range for a batch of length 4"):
        b[4]
    with pytest.raises(IndexError, match="must be 1-D"):
        b[torch.zeros(2, 2, dtype=torch.long)]
    for bad in ([0, 0, 1, 2], [0, 1, 2], [1, 2, 3, 4]):
        with pytest.raises(ValueError, match=r"not a permutation of range\(4\)"):
            b.reorder(bad)
    for call in (lambda: b.chunk(0), lambda: b.split(0), lambda: b.repeat(0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            call()
    with pytest.raises(ValueError, match="cannot pad an empty batch"):
        b[:0].pad_to_multiple(2)
    with pytest.raises(ValueError, match="unpad: pad=5 out of range"):
        b.unpad(5)


def test_load_of_a_plain_folder_says_what_is_missing(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="not a saved Batch"):
        Batch.load(tmp_path)


def test_chunk_sizes_by_hand() -> None:
    # 7 rows over 3 parts: the first 7 % 3 = 1 part gets the extra row -> 3, 2, 2.
    b = Batch.from_dict({"x": torch.arange(7)})
    assert [p["x"].tolist() for p in b.chunk(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert list(itertools.chain(*(p["x"].tolist() for p in b.split(3)))) == list(range(7))
