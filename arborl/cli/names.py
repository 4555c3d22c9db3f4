"""Names that the parsers offer as choices, spelled here so that building a parser (for
`--help`) imports no env code: importing `arborl.envs` registers every env with Gymnasium,
which loads numpy (about 0.3 s of a CLI call). `tests/cli/test_help.py` checks that each
equals the library's own constant.
"""

SPLITS = ("train", "val", "test")
"""`arborl.envs.SPLITS`: the standard task splits."""
POOL_MODES = ("inproc", "subprocess", "ray", "http")
"""`arborl.envs.packages.manifest.MODES`: the isolation modes of `arborl.envs.make_pool`."""
