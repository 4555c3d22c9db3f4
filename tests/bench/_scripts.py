"""The bench scripts' folder and a loader for them as modules (they are scripts, not a
package, and import `bench/common.py` as `common`)."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_script(name: str):
    """`bench/<name>.py` as a module, with `bench/` importable while it loads."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))
