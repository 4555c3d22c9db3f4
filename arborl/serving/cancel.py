"""Requests take the model in turn, for a bounded time, and stop when their client has gone.

`arborl serve` and `arborl rm serve` run one request at a time on their model. Two rules
bound what one client can cost the others (docs/security.md, "Time on the model"):

* **A fair queue.** Requests take the model in arrival order (`ModelQueue`, first come,
  first served). A request whose client disconnects while it waits leaves the queue without
  touching the model.
* **A deadline.** Once it has the model, a request holds it for at most `max_request_s`
  seconds. Past that, its work stops and the client gets a 504 naming the limit and the flag
  that sets it. A client that disconnects stops its request's work just as fast.

So a request waits at most (requests ahead of it) x `max_request_s`, and a client that
gives up costs the next one about a decode step, not the rest of its generation.

A thread cannot be stopped from outside in Python, so the long loops stop themselves: they
call `cancel_point()` between steps (`HFBackend` before each decode step, `RewardModel`
before each forward batch). It raises `Cancelled` when the request running on this thread
should end. Outside a server nothing is set, and `cancel_point()` is one context-variable
lookup. A backend that never calls it runs each call to its end: only the queue and the
client check before the model is taken then hold.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

POLL_S = 0.05
"""How often a waiting request and the disconnect watcher look again (seconds)."""


class Cancelled(Exception):
    """The request on this thread stopped. `reason`: 'disconnected' or 'deadline'."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message

    @property
    def status(self) -> int:
        """504 past the deadline; 499 (client closed request, nginx's code) otherwise."""
        return 504 if self.reason == "deadline" else 499


@dataclass
class RequestScope:
    """What `cancel_point()` checks for one request."""

    max_request_s: float | None
    """Longest time the request may hold the model (None or 0: no limit)."""
    flag: str
    """The setting that changes `max_request_s`, named in the 504 message."""
    gone: threading.Event = field(default_factory=threading.Event)
    """Set when the client disconnects."""
    started: float | None = None
    """`time.monotonic()` when the request took the model (None while it waits)."""

    def check(self) -> None:
        if self.gone.is_set():
            raise Cancelled("disconnected", "the client disconnected; its request was dropped")
        if self.started is None or not self.max_request_s:
            return
        held = time.monotonic() - self.started
        if held > self.max_request_s:
            raise Cancelled(
                "deadline",
                f"this request held the model for {held:.1f} s, over this server's limit of "
                f"{self.max_request_s:g} s per request ({self.flag}); ask for fewer tokens or "
                "rows per request, or raise the limit",
            )


_SCOPE: ContextVar[RequestScope | None] = ContextVar("arborl_request_scope", default=None)


def cancel_point() -> None:
    """Raise `Cancelled` if the request running on this thread should stop; else nothing."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.check()


class ModelQueue:
    """One request at a time on the model, in arrival order; leaving the queue is allowed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: deque[object] = deque()
        self._busy = False

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Wait for this request's turn (checking `cancel_point()`), then start its clock."""
        me = object()
        with self._cond:
            self._waiting.append(me)
            try:
                while self._busy or self._waiting[0] is not me:
                    self._cond.wait(POLL_S)
                    cancel_point()
            except BaseException:
                self._waiting.remove(me)
                self._cond.notify_all()
                raise
            self._waiting.popleft()
            self._busy = True
        scope = _SCOPE.get()
        if scope is not None:
            scope.started = time.monotonic()
        try:
            cancel_point()  # the client may have gone in the last poll interval
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()


async def run_request(
    request: Any, work: Callable[[], T], max_request_s: float | None, flag: str
) -> T:
    """`work()` on a worker thread under a `RequestScope`; the scope is marked gone as soon
    as `request` (a Starlette `Request`) sees its client disconnect."""
    from starlette.concurrency import run_in_threadpool

    scope = RequestScope(max_request_s, flag)

    def scoped() -> T:
        token = _SCOPE.set(scope)
        try:
            return work()
        finally:
            _SCOPE.reset(token)

    task = asyncio.ensure_future(run_in_threadpool(scoped))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_S)
            if done:
                return task.result()
            if not scope.gone.is_set() and await request.is_disconnected():
                scope.gone.set()
    except asyncio.CancelledError:  # the server is shutting down: let the thread stop too
        scope.gone.set()
        raise
