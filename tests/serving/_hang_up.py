"""Event-based checks for the model servers' cancellation (review 3 #14): a spy on the
model's entry point and a client that hangs up once the model has started on its request.

A time bound ("the next client waited under 15 s") lets a fast machine pass a server with
no cancellation at all, when the abandoned work happens to finish within it. The servers run
one request at a time on the model, so by the time the next client's answer arrives the
abandoned call has ended; `Spy.ends` says how: the `Cancelled` reason ('disconnected',
'deadline') or 'finished'."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

from arborl.serving.cancel import Cancelled


class Spy:
    """Wraps `obj.<method>` on the instance (the real one runs): `started` is set when a
    call begins, and `ends` gets 'finished' or the `Cancelled` reason when it ends."""

    def __init__(self, obj: Any, method: str) -> None:
        self.started = threading.Event()
        self.ends: list[str] = []
        real = getattr(obj, method)

        def spied(*args: Any, **kw: Any) -> Any:
            self.started.set()
            try:
                out = real(*args, **kw)
            except Cancelled as e:
                self.ends.append(e.reason)
                raise
            self.ends.append("finished")
            return out

        setattr(obj, method, spied)

    def reset(self) -> None:
        self.started.clear()
        self.ends.clear()


def hang_up_once_started(url: str, route: str, body: dict, token: str, spy: Spy) -> None:
    """POST `body` to `url + route` on a raw socket and close the socket as soon as `spy`
    sees the model start on it (so the hang-up is mid-work on any machine)."""
    spy.reset()
    where = urlsplit(url)
    data = json.dumps(body).encode()
    head = (
        f"POST {route} HTTP/1.1\r\nHost: {where.netloc}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    with socket.create_connection((where.hostname, where.port), timeout=30) as s:
        s.sendall(head.encode() + data)
        assert spy.started.wait(120), "the server never started on the request"
