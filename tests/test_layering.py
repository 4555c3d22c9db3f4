"""The package layering of ARCHITECTURE.md, checked on the source with `ast` (nothing is
imported, so a broken optional dependency cannot hide an import).

Every import of an arborl module counts: module-level and inside functions (lazy imports
are dependencies too, they only fail later), `from arborl import x`, relative imports, and
`importlib.import_module("arborl.x")` / `__import__("arborl.x")` with a literal string.
`"module:attr"` strings in registries do not count: they are plug-in entry points, resolved
by name at run time, which is how a lower layer is meant to reach a higher one.

Five rules, each reported as `file:line  imports  target  (layer X -> layer Y)`:
  (a) no import from a higher layer than `LAYERS` gives;
  (b) no two packages import each other, whatever their layers (more generally: no cycle
      between packages, so same-layer packages import each other in one direction only);
  (c) `arborl.algos` imports only the standard library, torch, numpy and `arborl.registry`;
  (d) every package under arborl/ has a place in `LAYERS`;
  (e) no cycle between modules either, inside a package included (`a.py` importing `b.py`
      that imports `a.py`, even lazily: the shared piece belongs in a third module below
      both). A package's `__init__` is a module like the others.

Run: `python -m pytest tests/test_layering.py -q`.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

# Bottom to top. ARCHITECTURE.md ("Packages", last paragraph): "A small registry helper ...
# sits at the bottom and serves every plug-in kind. Dependency direction: `algos` and `data`
# at the bottom; `envs`, `models`, `agent`, `generation` above them; `rollout`, `search`,
# `rewards` above those; `train`, `distributed`, `curate` on top; `cli` last. Nothing
# imports upwards." A module may import its own layer and any layer below it (rule b then
# keeps same-layer imports one-way).
LAYERS: dict[str, int] = {
    # 0: foundations, importing only the standard library (and PyYAML for config).
    "arborl": 0,  # arborl/__init__.py runs on every `import arborl.x`: it must stay empty
    "arborl.registry": 0,  # the one registry helper, stdlib only
    "arborl.lazy": 0,  # PEP 562 lazy package exports, stdlib only
    "arborl.progress": 0,  # progress bars or plain lines, stdlib (+ lazy tqdm)
    "arborl.phases": 0,  # named phase timers and token counts of a profiled step, stdlib
    "arborl.config": 0,
    "arborl.htmldata": 0,  # JSON for an HTML page's data block, stdlib only  # typed dataclass configs + YAML: a leaf any component's config may use
    # 1: the bottom packages of ARCHITECTURE.md.
    "arborl.algos": 1,
    "arborl.data": 1,
    "arborl.serving": 1,  # the servers' shared auth/limits/error layer, stdlib (+ lazy fastapi)
    # 2
    "arborl.envs": 2,
    "arborl.models": 2,
    "arborl.agent": 2,
    "arborl.generation": 2,
    # 3
    "arborl.rollout": 3,
    "arborl.search": 3,
    "arborl.rewards": 3,
    # 4
    "arborl.train": 4,
    "arborl.distributed": 4,
    "arborl.curate": 4,
    "arborl.report": 4,  # report.html: reads run dirs; train writes it (train -> report)
    "arborl.grid": 4,  # `arborl compare`'s grid runner: runs train/sft cells, reads report
    # 5: the command line, and `python -m arborl` should it ever exist.
    "arborl.cli": 5,
    "arborl.__main__": 5,
}

# Rule (c): what `arborl.algos` (pure functions of tensors) may import.
ALGOS = "arborl.algos"
ALGOS_ALLOWED_THIRD_PARTY = {"torch", "numpy"}
ALGOS_ALLOWED_ARBORL = {"arborl.registry", ALGOS}

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "arborl"


@dataclass(frozen=True)
class Import:
    """One import statement's target, as found in `path` at `line`."""

    path: str  # relative to the directory holding the package, e.g. arborl/rollout/config.py
    line: int
    source: str  # the importing module's unit (`arborl.rollout`)
    target: str  # the full imported module name (`arborl.search.config`, or `torch`)


def unit_of(module: str) -> str:
    """The layer-table key of a dotted arborl module: `arborl.x.y` -> `arborl.x`."""
    return ".".join(module.split(".")[:2])


def module_name(path: Path, root: Path) -> str:
    """`<root>/rollout/config.py` -> `arborl.rollout.config` (`__init__` dropped)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _literal_import_call(node: ast.Call) -> str | None:
    """The module of `importlib.import_module("x")`, `import_module("x")`, `__import__("x")`."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and ":" not in arg.value:
        return arg.value
    return None


def _is_module(path: Path) -> bool:
    """Whether `path` (no suffix) is a module or package on disk."""
    return path.is_dir() or path.with_suffix(".py").exists()


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every import in one file, at any depth (module level, functions, methods, `if`s)."""
    rel = path.relative_to(root.parent).as_posix()
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    source = unit_of(module)
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            # `from arborl import algos` imports the subpackage arborl.algos, not the root.
            base_dir = root.parent / base_name.replace(".", "/")
            targets = [
                f"{base_name}.{alias.name}" if _is_module(base_dir / alias.name) else base_name
                for alias in node.names
            ]
        elif isinstance(node, ast.Call):
            literal = _literal_import_call(node)
            targets = [literal] if literal else []
        found += [Import(rel, node.lineno, source, t) for t in dict.fromkeys(targets)]
    return found


def _fmt(imp: Import, target_unit: str) -> str:
    """`file:line  imports  target  (layer X -> layer Y)`, the line every rule reports."""
    src = f"layer {LAYERS.get(imp.source, '?')}"
    is_arborl = target_unit.split(".")[0] == imp.source.split(".")[0]
    dst = f"layer {LAYERS.get(target_unit, '?')}" if is_arborl else "outside arborl"
    return f"{imp.path}:{imp.line}  imports  {imp.target}  ({src} -> {dst})"


def _cycles(edges: dict[tuple[str, str], list[Import]]) -> list[list[str]]:
    """Strongly connected components of more than one unit (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def _report_cycles(edges: dict[tuple[str, str], list[Import]], fix: str) -> list[str]:
    """A heading per loop of `edges` (between packages or modules), then its edges and the
    import lines behind each."""
    lines: list[str] = []
    for component in _cycles(edges):
        lines.append(
            f"import cycle between {', '.join(component)} (every edge below is on a loop; "
            f"remove one direction, {fix}):"
        )
        for (a, b), imps in sorted(edges.items()):
            if a in component and b in component:
                mutual = " (they import each other)" if (b, a) in edges else ""
                lines.append(f"  {a} -> {b}{mutual}:")
                lines += [f"    {_fmt(i, unit_of(b))}" for i in imps]
    return lines


def check_layering(root: Path) -> list[str]:
    """Every violation of rules (a)-(e) under package directory `root`, one line each
    (a heading line opens each group). Empty when the layering holds."""
    pkg = root.name
    files = sorted(root.rglob("*.py"))
    all_imports = [imp for f in files for imp in imports_of(f, root)]
    arborl_imports = [i for i in all_imports if i.target == pkg or i.target.startswith(pkg + ".")]
    problems: list[str] = []

    # (d) every unit, importing or imported, has a layer.
    units = {unit_of(module_name(f, root)) for f in files}
    units |= {unit_of(i.target) for i in arborl_imports}
    for unit in sorted(units - LAYERS.keys()):
        problems.append(
            f"{unit} has no layer: add it to LAYERS at the top of tests/test_layering.py, in "
            "the layer ARCHITECTURE.md gives it (a new package is placed deliberately)"
        )

    # (a) nothing imports upwards.
    upward = [
        _fmt(i, unit_of(i.target))
        for i in arborl_imports
        if i.source in LAYERS
        and unit_of(i.target) in LAYERS
        and LAYERS[unit_of(i.target)] > LAYERS[i.source]
    ]
    if upward:
        problems.append("imports from a higher layer (ARCHITECTURE.md: nothing imports upwards):")
        problems += [f"  {line}" for line in upward]

    # (b) no cycle between units (two packages importing each other, or a longer loop).
    edges: dict[tuple[str, str], list[Import]] = {}
    for i in arborl_imports:
        if unit_of(i.target) != i.source:
            edges.setdefault((i.source, unit_of(i.target)), []).append(i)
    problems += _report_cycles(edges, "e.g. move the shared code down a layer")

    # (e) no cycle between modules (imports of a name that is not a module count for the
    # module it comes from: `from arborl.x.a import f` is an edge to arborl.x.a).
    modules = {module_name(f, root) for f in files}
    module_edges: dict[tuple[str, str], list[Import]] = {}
    for f in files:
        source = module_name(f, root)
        for i in imports_of(f, root):
            if i.target in modules and i.target != source:
                module_edges.setdefault((source, i.target), []).append(i)
    problems += _report_cycles(
        module_edges, "move the piece both need into a module below them, or one importer up"
    )

    # (c) algos: standard library, torch, numpy, arborl.registry only.
    allowed = set(sys.stdlib_module_names) | ALGOS_ALLOWED_THIRD_PARTY
    algos_bad = [
        i
        for i in all_imports
        if i.source == ALGOS
        and not (
            unit_of(i.target) in ALGOS_ALLOWED_ARBORL
            if i.target.split(".")[0] == pkg
            else i.target.split(".")[0] in allowed
        )
    ]
    if algos_bad:
        problems.append(
            "arborl.algos may import only the standard library, torch, numpy and "
            "arborl.registry (pure functions of tensors):"
        )
        problems += [f"  {_fmt(i, unit_of(i.target))}" for i in algos_bad]
    return problems


def test_layering():
    problems = check_layering(PACKAGE_ROOT)
    assert not problems, "package layering is broken:\n" + "\n".join(problems)


# --- the checker checks itself ------------------------------------------------------------
def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "arborl"


def test_checker_reports_upward_imports_cycles_algos_and_unplaced_packages(tmp_path):
    root = _write(
        tmp_path,
        {
            "arborl/__init__.py": "",
            "arborl/registry.py": "import difflib\n",
            "arborl/data/__init__.py": "",
            # (a) a lazy upward import, two layers up.
            "arborl/data/batch.py": "def f():\n    from arborl.rollout import loop\n",
            "arborl/rollout/__init__.py": "",
            "arborl/rollout/loop.py": "from arborl.registry import Registry\n",
            # (b) a cycle: a module-level import one way, importlib with a literal the other.
            "arborl/train/__init__.py": "from arborl.distributed import workers\n",
            "arborl/distributed/__init__.py": "",
            "arborl/distributed/workers.py": (
                "import importlib\n\ndef g():\n    return importlib.import_module('arborl.train')\n"
            ),
            # (b) a longer loop inside one layer, with no pair importing each other.
            "arborl/agent/__init__.py": "import arborl.models\n",
            "arborl/models/__init__.py": "from arborl.generation import hf\n",
            "arborl/generation/hf.py": "def f():\n    from arborl import agent\n",
            # (c) algos importing a third-party package and (relatively) a package beside it.
            "arborl/algos/__init__.py": "import numpy, torch\nfrom arborl import registry\n",
            "arborl/algos/bad.py": "import scipy\nfrom ..data import batch\n",
            # (d) a package with no layer.
            "arborl/newpkg/__init__.py": "",
            # Not imports: registry entry points and non-literal import_module calls.
            "arborl/envs/__init__.py": (
                "import importlib\nfrom arborl.data import batch\n"
                "ENTRY = {'x': 'arborl.cli.main:main'}\n"
                "def h(m):\n    return importlib.import_module(m)\n"
            ),
        },
    )
    report = "\n".join(check_layering(root))
    assert "arborl/data/batch.py:2  imports  arborl.rollout.loop  (layer 1 -> layer 3)" in report
    assert "import cycle between arborl.distributed, arborl.train" in report
    assert "arborl/train/__init__.py:1  imports  arborl.distributed.workers" in report
    assert "arborl/distributed/workers.py:4  imports  arborl.train  (layer 4 -> layer 4)" in report
    assert "arborl.train -> arborl.distributed (they import each other)" in report
    assert "import cycle between arborl.agent, arborl.generation, arborl.models" in report
    assert "arborl/generation/hf.py:2  imports  arborl.agent  (layer 2 -> layer 2)" in report
    assert "arborl/algos/bad.py:1  imports  scipy  (layer 1 -> outside arborl)" in report
    assert "arborl/algos/bad.py:2  imports  arborl.data.batch  (layer 1 -> layer 1)" in report
    assert "arborl.newpkg has no layer: add it to LAYERS" in report
    assert "arborl.cli" not in report  # the "module:attr" string is an entry point
    assert "imports  numpy" not in report and "imports  arborl.registry" not in report
    # Downward, one-way imports are fine: rollout -> registry, envs -> data.
    assert "arborl/rollout/loop.py" not in report and "arborl/envs" not in report


def test_checker_reports_module_cycles_inside_a_package(tmp_path):
    root = _write(
        tmp_path,
        {
            "arborl/__init__.py": "",
            # A loop of three through one lazy import (the bpe -> loading -> pretrained one).
            "arborl/models/__init__.py": "",
            "arborl/models/bpe.py": "def f():\n    from arborl.models.loading import load\n",
            "arborl/models/loading.py": "from arborl.models.pretrained import PRETRAINED\n",
            "arborl/models/pretrained.py": "from arborl.models.bpe import cache_dir\n",
            # Two modules importing each other, relatively, one of them lazily.
            "arborl/train/__init__.py": "",
            "arborl/train/build.py": "from .sft import lr_lambda\n",
            "arborl/train/sft.py": "def fit():\n    from . import build\n",
            # A submodule importing its own package, whose __init__ imports the submodule.
            "arborl/search/__init__.py": "from arborl.search.base import Budget\n",
            "arborl/search/base.py": "def f():\n    import arborl.search\n",
            # One-way imports, names and modules, top level and lazy: no loop.
            "arborl/envs/__init__.py": "from arborl.envs.pool import EnvPool\n",
            "arborl/envs/pool.py": "from arborl.envs import base\n",
            "arborl/envs/base.py": "import json\n",
            "arborl/envs/remote/__init__.py": "",
            "arborl/envs/remote/base.py": (
                "from arborl.envs.pool import check_reset_args\n"
                "def f():\n    from arborl.envs.pool import EnvPool\n"
            ),
        },
    )
    report = "\n".join(check_layering(root))
    cycle = (
        "import cycle between arborl.models.bpe, arborl.models.loading, arborl.models.pretrained"
    )
    assert cycle in report
    assert "  arborl.models.bpe -> arborl.models.loading:" in report
    assert "arborl/models/bpe.py:2  imports  arborl.models.loading  (layer 2 -> layer 2)" in report
    assert (
        "arborl/models/pretrained.py:1  imports  arborl.models.bpe  (layer 2 -> layer 2)" in report
    )
    assert "import cycle between arborl.train.build, arborl.train.sft" in report
    assert "arborl.train.build -> arborl.train.sft (they import each other)" in report
    assert "arborl/train/sft.py:2  imports  arborl.train.build  (layer 4 -> layer 4)" in report
    assert "import cycle between arborl.search, arborl.search.base" in report
    assert "arborl/search/base.py:2  imports  arborl.search  (layer 3 -> layer 3)" in report
    assert "arborl.envs" not in report
    assert report.count("import cycle") == 3


def test_checker_passes_a_clean_tree(tmp_path):
    root = _write(
        tmp_path,
        {
            "arborl/__init__.py": "",
            "arborl/data/__init__.py": "from arborl.data.batch import Batch\n",
            "arborl/data/batch.py": "import torch\nclass Batch: ...\n",
            "arborl/rollout/__init__.py": "from arborl.data import Batch\nfrom . import loop\n",
            "arborl/rollout/loop.py": "def f():\n    from arborl.config import load_config\n",
            "arborl/config/__init__.py": "import yaml\n",
        },
    )
    assert check_layering(root) == []


def test_layer_table_names_only_real_units():
    # A stale entry would silently allow a package that no longer exists; `arborl` is the
    # root __init__ and `arborl.__main__` is reserved for `python -m arborl`.
    stale = [
        unit
        for unit in LAYERS
        if unit not in ("arborl", "arborl.__main__")
        and not (PACKAGE_ROOT / unit.split(".")[1]).is_dir()
        and not (PACKAGE_ROOT / unit.split(".")[1]).with_suffix(".py").exists()
    ]
    assert not stale, f"LAYERS names {stale}, not under arborl/: remove or rename them"
