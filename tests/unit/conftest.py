"""Unit tests are pure logic: no sockets and no moto.

Every unit test runs with socket connect/bind refused (:class:`SocketBlocked`), so a test that
quietly reaches a server, moto's or anything else, fails loudly instead of passing slowly.
``test_isolation.py`` proves the guard works and that no unit module imports moto.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest


class SocketBlocked(RuntimeError):
    """A unit test tried to use the network. Not an OSError, so no retry loop swallows it."""


def _refuse(name: str) -> Any:
    def refused(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        raise SocketBlocked(
            f"unit tests open no sockets: socket.{name}{args!r} refused (move the test to tests/integration)"
        )

    return refused


@pytest.fixture(autouse=True)
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Refuse connect, connect_ex, bind and sendto on every socket for the test's duration."""
    for name in ("connect", "connect_ex", "bind", "sendto"):
        monkeypatch.setattr(socket.socket, name, _refuse(name))
    yield
