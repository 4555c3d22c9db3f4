"""The grid runner of `arborl compare`: it turns (arm, seed) into `arborl train`/`sft` runs
and reads what the runs write, as CleanRL's `benchmark.py` does. `compare` holds the grid
(its config, plan, pairing and resumption), `jobs` how a cell runs (in this process or as
a child process), `guard` the one-compare-per-folder lock. The comparison's numbers are
`arborl.report.compare`'s; nothing below this package imports it.
"""
