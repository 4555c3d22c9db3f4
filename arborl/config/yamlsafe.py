"""YAML loading with bounded alias expansion, duplicate-key and encoding checks.

`yaml.safe_load` never runs code, but a 1 KB file of nested aliases ("billion laughs")
expands to millions of nodes once a dict-typed field such as `env.kwargs` is copied or
dumped. `load_yaml` composes the node graph first (aliases stay shared there, so this is
cheap), counts the nodes the document would expand to, and refuses more than `max_nodes`
before anything is built; it also refuses duplicate keys, which YAML would silently resolve
to the last value.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_NODES = 100_000
"""Default cap on the expanded size of one YAML document (scalars + lists + mappings)."""


class YamlLimitError(ValueError):
    """The YAML is too large once aliases are expanded, or holds a duplicate key."""


def _expanded_size(node: yaml.Node, memo: dict[int, int], where: str) -> int:
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a cycle (recursive alias) counts once; the constructor handles it
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(v, memo, where) for v in node.value)
    elif isinstance(node, yaml.MappingNode):
        seen: set = set()
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                if k.value in seen:
                    raise YamlLimitError(f"{where}: duplicate key {k.value!r} (line "
                                         f"{k.start_mark.line + 1}); keep one")  # fmt: skip
                seen.add(k.value)
            size += _expanded_size(k, memo, where) + _expanded_size(v, memo, where)
    memo[key] = size
    return size


def load_yaml(text: str, where: str = "<yaml>", max_nodes: int = MAX_NODES) -> Any:
    """`yaml.safe_load(text)`, refusing documents that expand past `max_nodes` nodes."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError as e:
        raise YamlLimitError(f"{where}: YAML nested too deeply to read") from e
    if node is None:
        return None
    try:
        size = _expanded_size(node, {}, where)
    except RecursionError as e:
        raise YamlLimitError(f"{where}: YAML nested too deeply to read") from e
    if size > max_nodes:
        raise YamlLimitError(f"{where}: the YAML expands to {size} nodes once its aliases "
                             f"(*name) are resolved; the limit is {max_nodes}. Write the "
                             "values out or use fewer nested aliases")  # fmt: skip
    return yaml.safe_load(text)


def read_text(path: Any) -> str:
    """A config file's text as UTF-8, or a ValueError naming the file and the fix."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); save the file "
                         "as UTF-8") from e  # fmt: skip
