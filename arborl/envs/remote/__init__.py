"""Out-of-process transports for env pools: each client beside the server it talks to.

`base` holds `RemotePool` (the `Pool` interface over any transport, with the failure
policy), `EnvCallError` and `EnvErrorBudgetExceeded`. Then, one transport each:

- `subproc` (client) + `stdio_worker` (server): worker processes on pipes, one JSON line
  per batch (`mode="subprocess"`);
- `ray_pool`: Ray actors, each running a stdio worker in the env's interpreter
  (`mode="ray"`);
- `http_pool` (client) + `http_server` (the FastAPI env server) + `serve` (`ReplicaSet`,
  N servers kept alive, `arborl env serve`) (`mode="http"`);
- `openenv_pool` (client, `mode="openenv"`) + `openenv_server` (any arborl env over
  OpenEnv's WebSocket protocol, `arborl env serve --protocol openenv`): the OpenEnv bridge.

`host` (`EnvHost`: sessions of env instances, JSON-safe replies, signed snapshots) is what
every server wraps. Server-side modules import only the standard library, `arborl.envs`
and, for the HTTP and OpenEnv servers, FastAPI, uvicorn and websockets, never torch, so an
isolated interpreter needs nothing of arborl's training stack. Nothing here is imported by `import arborl.envs`
except `base`: the mode registry names each transport's pool builder as a lazy string.
"""
