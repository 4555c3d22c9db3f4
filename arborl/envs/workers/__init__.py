"""Out-of-process env workers: the code that runs *inside* an env's own interpreter.

`host` (sessions of env instances, JSON-safe replies, signed snapshots), `stdio_worker`
(the subprocess and Ray modes' worker, one JSON line per batch over a pipe) and
`http_server` (the FastAPI env server). They import only the standard library,
`arborl.envs` and, for the server, FastAPI and uvicorn, never torch, so an isolated
interpreter needs nothing of arborl's training stack.
"""
