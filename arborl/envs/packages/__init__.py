"""Env packages: envs that ship outside arborl with their own dependencies.

`manifest` reads and checks `arborl-env.toml`; `userdata` is the per-user store (which
packages are registered, where their interpreters and run files live); `isolate` builds a
package's own venv or conda prefix (`arborl env setup`); `dockerfile` writes a build
context whose image serves the env over HTTP (`arborl env dockerfile`). None of these
import the env itself: the package's code runs only in its own interpreter (see
`arborl.envs.remote`), or in-process when the pool mode is `inproc`.
"""
