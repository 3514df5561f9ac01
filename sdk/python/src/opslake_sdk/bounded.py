"""Reading an HTTP answer within a time and a size, whatever the server (or a proxy) does.

httpx's timeouts apply to each read of the socket, not to the answer: a server that sends a byte
every few seconds keeps a request going for ever, and an endless body fills memory. Both the
sender (a thread the agent's flush and exit wait on) and the playbooks read (the agent's own call)
read answers through :func:`read_bounded` instead.
"""

from __future__ import annotations

import time

import httpx

#: The largest answer read: a 202 for 500 ops lists 500 ids (~15 KB), 50 playbook entries are a
#: few hundred KB; anything near this is not opslake's answer.
MAX_ANSWER_BYTES = 4 * 1024 * 1024


class AnswerTooLarge(ValueError):
    """The answer passed :data:`MAX_ANSWER_BYTES`."""


def read_bounded(answer: httpx.Response, *, deadline: float, max_bytes: int = MAX_ANSWER_BYTES) -> bytes:
    """The (decoded) body of a streamed answer; :class:`httpx.ReadTimeout` once ``deadline``
    (``time.monotonic()``) has passed, :class:`AnswerTooLarge` past ``max_bytes``. A read in
    progress may end up to one read timeout after the deadline."""
    body = bytearray()
    for chunk in answer.iter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise AnswerTooLarge(f"the answer is too large (over {max_bytes} bytes)")
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the answer did not arrive within the timeout")
    return bytes(body)
