"""A self-contained HTML view of a search tree (no network, no external scripts).

The tree's JSON is embedded in the page and drawn by a few lines of inline JavaScript as
a collapsible outline: each node shows its action, value, visits and Q, flags (won, done,
pruned, on the best path), and its observation on click. Best-path nodes are bold and
green; pruned ones grey.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from arborl.htmldata import script_json
from arborl.search.base import SearchResult

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>arborl search: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; }}
ul {{ list-style: none; padding-left: 1.2em; border-left: 1px dotted #bbb; }}
li {{ margin: 2px 0; }}
.node {{ cursor: pointer; padding: 1px 4px; border-radius: 3px; }}
.best {{ font-weight: bold; color: #0a6b2f; }}
.won {{ background: #d6f5dd; }}
.pruned {{ color: #999; }}
.tog {{ display: inline-block; width: 1em; color: #666; }}
pre {{ background: #f4f4f4; padding: 6px; margin: 4px 0 4px 1em; }}
table {{ border-collapse: collapse; }} td {{ padding: 1px 8px; }}
</style></head><body>
<h2>{title}</h2>
<table>{summary}</table>
<p>Click a node to show its observation; click the triangle to fold a subtree.</p>
<div id="tree"></div>
<script type="application/json" id="data">{data}</script>
<script>
const doc = JSON.parse(document.getElementById("data").textContent);
const nodes = doc.tree.nodes, best = new Set(doc.best);
function fmt(x) {{ return x === null || x === undefined ? "-" : (+x).toFixed(3); }}
function label(n) {{
  const a = n.action === null ? "root" : JSON.stringify(n.action);
  let s = "#" + n.id + " " + a + "  v=" + fmt(n.value);
  if (n.visits) s += " N=" + n.visits + " Q=" + fmt(n.q);
  if (n.won) s += " WON"; else if (n.done) s += " done";
  if (n.pruned) s += " pruned";
  return s;
}}
function build(id) {{
  const n = nodes[id], li = document.createElement("li");
  const tog = document.createElement("span"); tog.className = "tog";
  const span = document.createElement("span");
  span.className = "node" + (best.has(id) ? " best" : "") + (n.won ? " won" : "")
    + (n.pruned ? " pruned" : "");
  span.textContent = label(n);
  const pre = document.createElement("pre"); pre.textContent = n.observation;
  pre.style.display = "none";
  span.onclick = () => {{ pre.style.display = pre.style.display === "none" ? "" : "none"; }};
  li.append(tog, span, pre);
  if (n.children.length) {{
    const ul = document.createElement("ul");
    n.children.forEach(c => ul.appendChild(build(c)));
    tog.textContent = "\\u25be";
    tog.onclick = () => {{ const h = ul.style.display === "none";
      ul.style.display = h ? "" : "none"; tog.textContent = h ? "\\u25be" : "\\u25b8"; }};
    li.appendChild(ul);
  }}
  return li;
}}
const root = document.createElement("ul"); root.appendChild(build(0));
document.getElementById("tree").appendChild(root);
</script></body></html>
"""


def render_html(result: SearchResult | dict[str, Any], title: str = "") -> str:
    """The page for a `SearchResult` (or its `to_dict()`)."""
    doc = result.to_dict() if isinstance(result, SearchResult) else result
    rows = {
        "algo": doc["algo"],
        "won": doc["won"],
        "stop reason": doc["stop_reason"],
        "actions": " ".join(map(str, doc["actions"])),
        **{k: v for k, v in doc["stats"].items() if isinstance(v, int | float)},
    }
    summary = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
        for k, v in rows.items()
    )
    data = script_json(doc, default=str)  # no observation can end or re-open the block
    return _PAGE.format(title=html.escape(title or doc["algo"]), summary=summary, data=data)


def write_html(result: SearchResult | dict[str, Any], path: str | Path, title: str = "") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(result, title))
    return path
