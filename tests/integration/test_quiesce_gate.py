"""The local stack's checkpoint gate: a checkpoint sees no invocation half-way, never waits
forever behind a long one, and new invocations wait only for a running checkpoint or the one at
stop. (Here, not in tests/unit: importing opslake_local imports the stack, hence moto.)"""

from __future__ import annotations

import threading

import pytest

from opslake_local.persist import QuiesceGate

pytestmark = pytest.mark.integration


def test_a_checkpoint_waits_for_running_invocations_and_gives_up_after_its_timeout() -> None:
    gate = QuiesceGate()
    with gate.shared(), gate.exclusive(timeout_s=0.05) as quiet:
        assert quiet is False  # an invocation runs: no checkpoint now, nothing held
    with gate.exclusive(timeout_s=0.05) as quiet:
        assert quiet is True
    assert gate.changes == 1


def test_invocations_wait_while_a_checkpoint_holds_the_gate() -> None:
    gate = QuiesceGate()
    entered = threading.Event()

    def invoke() -> None:
        with gate.shared():
            entered.set()

    with gate.exclusive() as quiet:
        assert quiet
        worker = threading.Thread(target=invoke)
        worker.start()
        assert not entered.wait(0.1)  # blocked behind the checkpoint
    assert entered.wait(5)
    worker.join(5)


def test_a_waiting_checkpoint_goes_before_new_invocations() -> None:
    gate = QuiesceGate()
    order: list[str] = []
    release = threading.Event()
    checkpoint_waiting = threading.Event()

    def long_invocation() -> None:
        with gate.shared():
            release.wait(5)
            order.append("long done")

    def checkpoint() -> None:
        checkpoint_waiting.set()
        with gate.exclusive() as quiet:
            assert quiet
            order.append("checkpoint")

    def late_invocation() -> None:
        with gate.shared():
            order.append("late")

    threads = [threading.Thread(target=long_invocation)]
    threads[0].start()
    while not gate._running:  # the long invocation holds the gate
        pass
    threads.append(threading.Thread(target=checkpoint))
    threads[1].start()
    checkpoint_waiting.wait(5)
    while not gate._waiting:
        pass
    threads.append(threading.Thread(target=late_invocation))
    threads[2].start()
    release.set()
    for thread in threads:
        thread.join(5)
    assert order == ["long done", "checkpoint", "late"]


def test_a_periodic_checkpoint_waiting_behind_a_long_invocation_never_holds_new_ones_back() -> None:
    """Issue 12: during a multi-minute analyzer run, every periodic checkpoint attempt (every 5 s)
    used to block all new requests for its whole wait (2 s) and then give up anyway."""
    gate = QuiesceGate()
    release, entered = threading.Event(), threading.Event()
    results: list[bool] = []

    def long_invocation() -> None:
        with gate.shared():
            release.wait(30)

    def checkpoint() -> None:
        with gate.exclusive(timeout_s=30) as quiet:
            results.append(quiet)

    def late_invocation() -> None:
        with gate.shared():
            entered.set()

    long_thread = threading.Thread(target=long_invocation)
    long_thread.start()
    while not gate._running:
        pass
    checkpoint_thread = threading.Thread(target=checkpoint)
    checkpoint_thread.start()
    while not gate._waiting:  # the checkpoint waits for quiet
        pass
    late = threading.Thread(target=late_invocation)
    late.start()
    assert entered.wait(10)  # the new invocation ran while the checkpoint was still waiting
    assert checkpoint_thread.is_alive() and results == []
    release.set()
    for thread in (long_thread, late, checkpoint_thread):
        thread.join(10)
    assert results == [True]  # and the checkpoint still got its quiet moment
