"""Out-of-process transports for env pools: each client beside the server it talks to.

`base` holds `RemotePool` (the `Pool` interface over any transport, with the failure
policy), `EnvCallError` and `EnvErrorBudgetExceeded`. Then, one transport each:

- `subproc` (client) + `stdio_worker` (server): worker processes on pipes, one JSON line
  per batch (`mode="subprocess"`);
- `ray_pool`: Ray actors, each running a stdio worker in the env's interpreter
  (`mode="ray"`);
- `http_pool` (client) + `http_server` (the FastAPI env server) + `serve` (`ReplicaSet`,
  N servers kept alive, `arborl env serve`) (`mode="http"`).

`host` (`EnvHost`: sessions of env instances, JSON-safe replies, signed snapshots) is what
both servers wrap. Server-side modules import only the standard library, `arborl.envs`
and, for the HTTP server, FastAPI and uvicorn, never torch, so an isolated interpreter
needs nothing of arborl's training stack. Nothing here is imported by `import arborl.envs`
except `base`: the mode registry names each transport's pool builder as a lazy string.
"""
