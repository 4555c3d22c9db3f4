"""`Batch`: the one container passed between rollout, rewards, advantages, training and workers.

Three parts, all batch-first:
  - `tensors`: str -> Tensor with shape (B, ...);
  - `meta`:    str -> numpy array of length B (object dtype for strings, tuples, dicts);
  - `info`:    a dict of batch-level values (not indexed).

Every operation keeps the three in step, and every length or key mistake raises an error
that names the key and both sizes. Pickling converts tensors to numpy, which is what
Ray's object store moves cheaply (zero-copy reads); `save`/`load` use safetensors for
tensors and JSON for meta and info.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arborl.data.codec import decode_json_value, encode_json_value


def _as_meta_array(key: str, value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, torch.Tensor):
        raise TypeError(f"meta[{key!r}] is a torch.Tensor; put tensors in `tensors`, not `meta`")
    values = list(value)
    arr = np.empty(len(values), dtype=object)
    arr[:] = values if values else []
    # Let numeric and bool lists keep a native dtype; everything else stays object.
    if values and all(isinstance(v, bool | np.bool_) for v in values):
        return arr.astype(bool)
    if values and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values):
        return arr.astype(np.int64)
    if values and all(isinstance(v, float | np.floating) for v in values):
        return arr.astype(np.float64)
    return arr


class Batch:
    """Batch-first tensors + per-sample metadata + batch-level info."""

    def __init__(
        self,
        tensors: dict[str, torch.Tensor] | None = None,
        meta: dict[str, np.ndarray] | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.tensors: dict[str, torch.Tensor] = dict(tensors or {})
        self.meta: dict[str, np.ndarray] = {
            k: _as_meta_array(k, v) for k, v in (meta or {}).items()
        }
        self.info: dict[str, Any] = dict(info or {})
        self._check()

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor | Sequence],
        meta: dict[str, Any] | None = None,
        info: dict[str, Any] | None = None,
    ) -> Batch:
        """Build a batch; non-tensor values in `tensors` are converted with `torch.as_tensor`."""
        tensors = {
            k: v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for k, v in tensors.items()
        }
        return cls(tensors, meta, info)

    # --- structure ----------------------------------------------------------------------
    def _check(self) -> None:
        n = None
        first = None
        for part, d in (("tensors", self.tensors), ("meta", self.meta)):
            for k, v in d.items():
                if part == "tensors" and not isinstance(v, torch.Tensor):
                    raise TypeError(f"tensors[{k!r}] is {type(v).__name__}, expected a Tensor")
                if v.ndim == 0:
                    raise ValueError(f"{part}[{k!r}] is a scalar; batch fields need a first dim")
                if n is None:
                    n, first = len(v), f"{part}[{k!r}]"
                elif len(v) != n:
                    raise ValueError(
                        f"{part}[{k!r}] has length {len(v)} but {first} has length {n}; "
                        "every field of a Batch must share the batch dimension"
                    )
        both = self.tensors.keys() & self.meta.keys()
        if both:
            raise ValueError(f"keys {sorted(both)} are both in tensors and meta")

    def __len__(self) -> int:
        for d in (self.tensors, self.meta):
            for v in d.values():
                return len(v)
        return 0

    def keys(self) -> list[str]:
        return [*self.tensors, *self.meta]

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.meta

    def __repr__(self) -> str:
        ts = ", ".join(f"{k}: {tuple(v.shape)} {v.dtype}" for k, v in self.tensors.items())
        ms = ", ".join(f"{k}: {v.dtype}" for k, v in self.meta.items())
        return f"Batch(len={len(self)}, tensors={{{ts}}}, meta={{{ms}}}, info={list(self.info)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        if self.tensors.keys() != other.tensors.keys() or self.meta.keys() != other.meta.keys():
            return False
        for k, v in self.tensors.items():
            o = other.tensors[k]
            if v.shape != o.shape or v.dtype != o.dtype or not torch.equal(v, o):
                return False
        for k, v in self.meta.items():
            o = other.meta[k]
            if len(v) != len(o) or not all(_meta_equal(a, b) for a, b in zip(v, o)):
                return False
        # Key by key: `dict == dict` raises on numpy-array values.
        return self.info.keys() == other.info.keys() and all(
            _meta_equal(v, other.info[k]) for k, v in self.info.items()
        )

    def _missing(self, keys: Iterable[str]) -> list[str]:
        return [k for k in keys if k not in self]

    def __getitem__(self, index: Any) -> Batch | torch.Tensor | np.ndarray:
        """`b["key"]` returns the field; an int, slice, index tensor or bool mask selects rows."""
        if isinstance(index, str):
            if index in self.tensors:
                return self.tensors[index]
            if index in self.meta:
                return self.meta[index]
            raise KeyError(f"no field {index!r} in batch; fields are {self.keys()}")
        if isinstance(index, int | np.integer):
            n = len(self)
            if not -n <= index < n:
                raise IndexError(f"row {index} out of range for a batch of length {n}")
            index = slice(index % n, index % n + 1)
        if isinstance(index, slice):
            return self._take(index, index)
        idx = torch.as_tensor(index)
        if idx.numel() == 0 and idx.dtype != torch.bool:
            idx = idx.long()  # `b[[]]`: an empty list becomes a float tensor
        if idx.dtype == torch.bool:
            if idx.shape != (len(self),):
                raise IndexError(
                    f"bool mask has shape {tuple(idx.shape)}, batch has length {len(self)}"
                )
            idx = idx.nonzero().flatten()
        if idx.ndim != 1:
            raise IndexError(f"index must be 1-D, got shape {tuple(idx.shape)}")
        return self._take(idx, idx.numpy())

    def _take(self, t_index: Any, m_index: Any) -> Batch:
        return Batch(
            {k: v[t_index] for k, v in self.tensors.items()},
            {k: v[m_index] for k, v in self.meta.items()},
            dict(self.info),
        )

    def __setitem__(self, key: str, value: Any) -> None:
        """Add or replace a field; tensors go to `tensors`, anything else to `meta`."""
        n = len(self)
        if self.keys() and len(value) != n:
            raise ValueError(f"field {key!r} has length {len(value)}, batch has length {n}")
        if isinstance(value, torch.Tensor):
            self.meta.pop(key, None)
            self.tensors[key] = value
        else:
            self.tensors.pop(key, None)
            self.meta[key] = _as_meta_array(key, value)

    # --- key operations -----------------------------------------------------------------
    def select(self, *keys: str) -> Batch:
        missing = self._missing(keys)
        if missing:
            raise KeyError(f"select: no field(s) {missing}; fields are {self.keys()}")
        return Batch(
            {k: v for k, v in self.tensors.items() if k in keys},
            {k: v for k, v in self.meta.items() if k in keys},
            dict(self.info),
        )

    def pop(self, *keys: str) -> Batch:
        """Remove `keys` from this batch and return them as a new batch."""
        out = self.select(*keys)
        for k in keys:
            self.tensors.pop(k, None)
            self.meta.pop(k, None)
        return out

    def union(self, other: Batch) -> Batch:
        """Fields of both batches; a key present in both must hold equal values."""
        if len(self) != len(other) and self.keys() and other.keys():
            raise ValueError(f"union: lengths differ ({len(self)} vs {len(other)})")
        tensors, meta = dict(self.tensors), dict(self.meta)
        for k, v in other.tensors.items():
            if k in tensors and not (tensors[k].shape == v.shape and torch.equal(tensors[k], v)):
                raise ValueError(f"union: tensors[{k!r}] differ between the two batches")
            tensors[k] = v
        for k, v in other.meta.items():
            if k in meta and not all(_meta_equal(a, b) for a, b in zip(meta[k], v)):
                raise ValueError(f"union: meta[{k!r}] differ between the two batches")
            meta[k] = v
        for k, v in other.info.items():
            if k in self.info and not _meta_equal(self.info[k], v):
                raise ValueError(f"union: info[{k!r}] differ ({self.info[k]!r} vs {v!r})")
        return Batch(tensors, meta, {**self.info, **other.info})

    # --- row operations -----------------------------------------------------------------
    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """Rows of all batches in order; they must have the same keys and compatible dtypes.
        `info` is taken from the first batch."""
        batches = list(batches)
        if not batches:
            raise ValueError("concat needs at least one batch")
        first = batches[0]
        for i, b in enumerate(batches[1:], 1):
            if b.tensors.keys() != first.tensors.keys() or b.meta.keys() != first.meta.keys():
                raise KeyError(
                    f"concat: batch {i} has fields {b.keys()}, batch 0 has {first.keys()}"
                )
        tensors = {}
        for k in first.tensors:
            parts = [b.tensors[k] for b in batches]
            dtypes = {p.dtype for p in parts}
            if len(dtypes) > 1:
                raise TypeError(f"concat: tensors[{k!r}] has dtypes {sorted(map(str, dtypes))}")
            shapes = {tuple(p.shape[1:]) for p in parts}
            if len(shapes) > 1:
                raise ValueError(
                    f"concat: tensors[{k!r}] has trailing shapes {sorted(shapes)}; "
                    "pad them to one length first"
                )
            tensors[k] = torch.cat(parts)
        meta = {k: np.concatenate([b.meta[k] for b in batches]) for k in first.meta}
        return Batch(tensors, meta, dict(first.info))

    def chunk(self, n: int) -> list[Batch]:
        """`n` consecutive parts of (nearly) equal size, like `torch.chunk` but always `n`
        parts when `len(self) >= n` (the first `len % n` parts get one extra row)."""
        if n < 1:
            raise ValueError(f"chunk: n={n} must be >= 1")
        size, extra = divmod(len(self), n)
        out, start = [], 0
        for i in range(n):
            stop = start + size + (1 if i < extra else 0)
            if stop > start:
                out.append(self[start:stop])
            start = stop
        return out

    def split(self, size: int) -> list[Batch]:
        """Consecutive parts of `size` rows (the last may be shorter)."""
        if size < 1:
            raise ValueError(f"split: size={size} must be >= 1")
        return [self[i : i + size] for i in range(0, len(self), size)]

    def repeat(self, n: int, interleave: bool = True) -> Batch:
        """Each row `n` times: interleaved (a a b b) or tiled (a b a b)."""
        if n < 1:
            raise ValueError(f"repeat: n={n} must be >= 1")
        idx = torch.arange(len(self))
        idx = idx.repeat_interleave(n) if interleave else idx.repeat(n)
        return self[idx]

    def reorder(self, perm: Sequence[int] | torch.Tensor) -> Batch:
        """Rows in the order `perm`, which must be a permutation of range(len)."""
        perm = torch.as_tensor(perm, dtype=torch.long)
        if perm.shape != (len(self),) or not torch.equal(
            perm.sort().values, torch.arange(len(self))
        ):
            raise ValueError(f"reorder: perm is not a permutation of range({len(self)})")
        return self[perm]

    def pad_to_multiple(self, k: int) -> tuple[Batch, int]:
        """Append copies of the first rows until len is a multiple of `k` (so it divides
        over k workers); returns (padded batch, number of rows added). Undo with `unpad`."""
        if k < 1:
            raise ValueError(f"pad_to_multiple: k={k} must be >= 1")
        n = len(self)
        if n == 0:
            raise ValueError("pad_to_multiple: cannot pad an empty batch")
        pad = (-n) % k
        if pad == 0:
            return self, 0
        idx = torch.arange(pad) % n
        return Batch.concat([self, self[idx]]), pad

    def unpad(self, pad: int) -> Batch:
        """Drop the `pad` rows that `pad_to_multiple` appended."""
        if not 0 <= pad <= len(self):
            raise ValueError(f"unpad: pad={pad} out of range for length {len(self)}")
        return self[: len(self) - pad] if pad else self

    def to(self, device: str | torch.device) -> Batch:
        return Batch({k: v.to(device) for k, v in self.tensors.items()}, self.meta, self.info)

    # --- serialisation --------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # numpy arrays are what Ray's object store serialises zero-copy.
        return {
            "tensors": {k: _to_numpy(v) for k, v in self.tensors.items()},
            "dtypes": {k: str(v.dtype) for k, v in self.tensors.items()},
            "meta": self.meta,
            "info": self.info,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.tensors = {}
        for k, v in state["tensors"].items():
            t = torch.from_numpy(np.array(v))  # copy: object-store buffers are read-only
            dtype = getattr(torch, state["dtypes"][k].removeprefix("torch."))
            self.tensors[k] = t.view(dtype) if t.dtype != dtype else t
        self.meta = state["meta"]
        self.info = state["info"]

    def save(self, path: str | Path) -> Path:
        """Write `path/tensors.safetensors` and `path/meta.json` (meta + info)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors, seen = {}, set()
        for k, v in self.tensors.items():
            v = v.detach().contiguous()
            ptr = v.untyped_storage().data_ptr()
            # safetensors refuses tensors that share memory (e.g. after `b["y"] = b["x"]`).
            tensors[k] = v.clone() if ptr in seen else v
            seen.add(ptr)
        save_file(tensors, path / "tensors.safetensors")
        doc = {
            "length": len(self),
            "tensor_order": list(self.tensors),
            "meta": {
                k: {"dtype": str(v.dtype), "values": [encode_json_value(x) for x in v.tolist()]}
                for k, v in self.meta.items()
            },
            "info": encode_json_value(self.info),
        }
        (path / "meta.json").write_text(json.dumps(doc))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Batch:
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / "meta.json").exists():
            raise FileNotFoundError(f"{path} is not a saved Batch (no meta.json)")
        doc = json.loads((path / "meta.json").read_text())
        raw = load_file(path / "tensors.safetensors")
        tensors = {k: raw[k] for k in doc["tensor_order"]}
        meta = {}
        for k, m in doc["meta"].items():
            values = [decode_json_value(x) for x in m["values"]]
            if m["dtype"] == "object":
                arr = np.empty(len(values), dtype=object)
                arr[:] = values if values else []
            else:
                arr = np.array(values, dtype=m["dtype"])
            meta[k] = arr
        return cls(tensors, meta, decode_json_value(doc["info"]))


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    # numpy has no bfloat16: move the raw bits as int16 and view them back on unpickling.
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _meta_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # NaN == NaN for round-trip checks
    return bool(a == b)
