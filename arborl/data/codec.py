"""A JSON codec that keeps the Python types meta fields use: tuples (GiGPO anchors are
tuples and must stay hashable), numpy scalars and nested containers."""

from __future__ import annotations

from typing import Any

import numpy as np


def encode_json_value(x: Any) -> Any:
    if isinstance(x, tuple):
        return {"__tuple__": [encode_json_value(v) for v in x]}
    if isinstance(x, list):
        return [encode_json_value(v) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x):
            return {k: encode_json_value(v) for k, v in x.items()}
        return {"__items__": [[encode_json_value(k), encode_json_value(v)] for k, v in x.items()]}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return {"__ndarray__": [encode_json_value(v) for v in x.tolist()]}
    if isinstance(x, float) and x != x:
        return {"__nan__": True}
    if x is None or isinstance(x, str | int | float | bool):
        return x
    raise TypeError(
        f"cannot save a value of type {type(x).__name__} ({x!r:.60}); meta and info values "
        "must be str, numbers, bools, None, tuples, lists, dicts or numpy arrays"
    )


def decode_json_value(x: Any) -> Any:
    if isinstance(x, list):
        return [decode_json_value(v) for v in x]
    if isinstance(x, dict):
        if "__tuple__" in x:
            return tuple(decode_json_value(v) for v in x["__tuple__"])
        if "__items__" in x:
            return {decode_json_value(k): decode_json_value(v) for k, v in x["__items__"]}
        if "__ndarray__" in x:
            return np.array(decode_json_value(x["__ndarray__"]))
        if "__nan__" in x:
            return float("nan")
        return {k: decode_json_value(v) for k, v in x.items()}
    return x
