"""The exit status `arborl train` owes a finished run: 3 when its summary says it learned
nothing (a toy run of a few steps often has no learning signal; docs/training.md, "A run
that learned nothing"), else 0. Tests of the pipeline's mechanics assert this agreement
instead of a bare 0, so a run that trained on nothing can never pass as a normal one."""

import json
from pathlib import Path


def owed_status(run: Path) -> int:
    failures = json.loads((Path(run) / "summary.json").read_text())["failures"]
    return 3 if failures["verdict"] else 0
