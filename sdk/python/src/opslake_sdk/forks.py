"""Fresh state in a forked child for the objects that hold threads, locks or connections.

A child of ``os.fork()`` (multiprocessing's default start method on Linux, gunicorn's preload,
Celery's prefork pool) gets the parent's memory but only the thread that forked: a lock another
thread held at that moment stays held forever, the sender thread does not exist, and a pooled
connection is a socket the parent is still using. Each registered object's ``_after_fork()`` runs
in the child before anything else, so the child's first tool call, ``stats`` or ``flush`` finds
its own locks, its own buffer and its own connections (the parent's queued ops are the parent's
to send).
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

log = logging.getLogger("opslake_sdk")


class ForkAware(Protocol):
    def _after_fork(self) -> None: ...


_OBJECTS: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def reset_after_fork(obj: ForkAware) -> None:
    """Call ``obj._after_fork()`` in every child forked from now on (while ``obj`` lives)."""
    _OBJECTS.add(obj)


def _in_child() -> None:
    for obj in list(_OBJECTS):
        try:
            obj._after_fork()
        except Exception:  # never fail a fork; the object logs and carries on as it can
            log.exception("opslake: resetting after fork failed")


if hasattr(os, "register_at_fork"):  # POSIX only; Windows has no fork
    os.register_at_fork(after_in_child=_in_child)
