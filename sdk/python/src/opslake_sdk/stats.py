"""What the client has done with the ops it was given: counters a user can read at any time."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Stats:
    """A snapshot of the client's counters (``client.stats``).

    Every op given to the client ends in exactly one of ``accepted``, ``rejected``, ``failed``
    or ``dropped``; until then it is ``pending``. So ``queued == accepted + rejected + failed +
    pending`` at any moment, and ``dropped`` counts the ops the bounded buffer (or a closed or
    unconfigured client) turned away before they were queued.
    """

    queued: int = 0  #: ops taken into the buffer
    pending: int = 0  #: queued ops not yet settled (buffered or being sent)
    sent: int = 0  #: ops in requests the server answered with 2xx (each op once)
    accepted: int = 0  #: ops the server accepted (the lake will hold them)
    rejected: int = 0  #: ops the server refused (listed in a 202, or a whole 4xx batch); not retried
    failed: int = 0  #: ops given up: every retry failed, or close() ran out of time
    dropped: int = 0  #: ops never queued: the buffer was full, or the client closed or unconfigured
    redacted: int = 0  #: accepted ops whose ids held a secret (stored under redacted ids)
    requests: int = 0  #: POST /events requests made (retries included)
    retries: int = 0  #: requests that resent a batch
    failed_batches: int = 0  #: batches not delivered (retries exhausted, refused with a 4xx, or timed out)
    errors: int = 0  #: SDK-internal errors (logged; never raised into the agent's code)
    playbook_requests: int = 0  #: GET /playbooks requests
    playbook_not_modified: int = 0  #: answers that were 304: the cached entries were returned
    playbook_errors: int = 0  #: reads that failed (the last cached entries, or none, were returned)


class Counters:
    """Mutable counters behind :class:`Stats`; the caller holds the client's lock while changing them."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {f.name: 0 for f in fields(Stats) if f.name != "pending"}

    def add(self, name: str, amount: int = 1) -> None:
        self.values[name] += amount

    def snapshot(self) -> Stats:
        v = self.values
        pending = v["queued"] - v["accepted"] - v["rejected"] - v["failed"]
        return Stats(pending=pending, **v)
