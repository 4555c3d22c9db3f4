"""JSON for a `<script type="application/json">` block of a self-contained HTML page.

The report page (`arborl.report.page`) and the search-tree page (`arborl.search.html`)
both embed their data this way and read it back with `JSON.parse`; `script_json` writes
it so that no string in it can end or re-open the script element and no float breaks
`JSON.parse`. Standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

SCRIPT_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
"""Characters written as JSON escapes in the data block. In a <script> element the HTML
tokenizer reacts to `</script` (ends it) and to `<!--` followed by `<script` (the "double
escaped" state, where the block's own `</script>` no longer ends it and the block swallows
the scripts after it), so no `<` may reach it raw; `>` and `&` go too, as in Go's
html/template and Django's json_script. U+2028/2029 end a line in older JavaScript. These
characters occur only inside JSON strings, where the escape reads back as the same text."""


def finite_or_name(obj: Any) -> Any:
    """`obj` with every non-finite float replaced by its JavaScript name ("NaN",
    "Infinity", "-Infinity"): JSON has no such number, and `JSON.parse` rejects the bare
    `NaN` Python writes. A page shows the name (`(+x).toFixed` prints it too), and Plotly
    leaves a gap for a name where it wants a number."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: finite_or_name(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_or_name(v) for v in obj]
    return obj


def script_json(obj: Any, default: Callable[[Any], Any] | None = None) -> str:
    """JSON that an HTML <script> element holds intact and `JSON.parse` reads back as
    `obj`, for any strings and floats in it (`SCRIPT_ESCAPES`, `finite_or_name`);
    `default` as in `json.dumps` (for values JSON has no type for)."""
    text = json.dumps(finite_or_name(obj), allow_nan=False, default=default)
    return text.translate(SCRIPT_ESCAPES)
