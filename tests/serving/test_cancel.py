"""`arborl.serving.cancel`: the fair queue and the per-request checks the model servers share
(the servers themselves are tested in tests/generation/test_server_cancel.py and
tests/rewards/test_rm_server_cancel.py)."""

from __future__ import annotations

import threading
import time

import pytest

from arborl.serving.cancel import _SCOPE, Cancelled, ModelQueue, RequestScope, cancel_point


def _in_scope(scope: RequestScope, fn) -> None:
    token = _SCOPE.set(scope)
    try:
        fn()
    finally:
        _SCOPE.reset(token)


def test_cancel_point_outside_a_server_does_nothing():
    cancel_point()


def test_requests_take_the_model_in_arrival_order_and_a_gone_one_never_runs():
    queue, order, gone = ModelQueue(), [], RequestScope(None, "--flag")
    first_in = threading.Event()
    release = threading.Event()

    def first():
        with queue.hold():
            first_in.set()
            release.wait(10)
            order.append("first")

    def request(name: str, scope: RequestScope | None = None):
        def body():
            try:
                with queue.hold():
                    order.append(name)
            except Cancelled as e:
                order.append(f"{name}: {e.reason}")

        _in_scope(scope or RequestScope(None, "--flag"), body)

    threads = [threading.Thread(target=first)]
    threads[0].start()
    first_in.wait(10)
    for name, scope in [("a", None), ("gone", gone), ("b", None), ("c", None)]:
        threads.append(threading.Thread(target=request, args=(name, scope)))
        threads[-1].start()
        time.sleep(0.2)  # arrive in this order
    gone.gone.set()  # its client hangs up while it waits
    time.sleep(0.2)
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["gone: disconnected", "first", "a", "b", "c"]


def test_the_deadline_counts_from_taking_the_model():
    queue = ModelQueue()
    scope = RequestScope(0.2, "`serve --max-request-s`")

    def body():
        with queue.hold():
            cancel_point()  # just taken: within the limit
            time.sleep(0.3)
            cancel_point()

    with pytest.raises(Cancelled) as e:
        _in_scope(scope, body)
    assert e.value.reason == "deadline" and e.value.status == 504
    assert "limit of 0.2 s" in e.value.message and "`serve --max-request-s`" in e.value.message
    with queue.hold():  # released after the error
        pass
