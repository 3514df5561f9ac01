"""The read side: ``GET /playbooks`` with ETag caching, and the entries it serves.

The server sends an ``ETag`` with every answer and answers ``304 Not Modified`` (no body) to a
request whose ``If-None-Match`` names it, so an agent that asks before every task pays for the
entries once per change. The cache is per query (endpoint, task class, words, limit).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import httpx

from opslake_sdk.bounded import read_bounded

log = logging.getLogger("opslake_sdk")

PLAYBOOKS_PATH = "/playbooks"
MAX_CACHED_QUERIES = 256


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class PlaybookEntry:
    """One piece of advice: when ``trigger`` holds, ``do`` (or ``avoid``, see ``kind``) ``action``
    (``instead_of``: the failing form it replaces, for an entry written from a contrast of failures
    with successes; ``fix_kind`` says what kind of fix: value_shape, missing_argument,
    preceding_call, error_rule, column, …; ``fix_names`` its names: the argument and its form, the
    tool to call first …; ``fix_failures`` / ``fix_successes`` the calls behind it).

    Every entry is in a holdout experiment (``experiment_stage`` ``new`` or ``graduated``): some API
    keys are not served it, and opslake compares their failure rate (``holdout_rate``) with that of
    the keys served it (``treatment_rate``); ``effect`` is the difference (holdout minus treatment,
    > 0: it helps) within ``effect_low`` … ``effect_high``, and ``helpful_count`` /
    ``harmful_count`` count its verdicts. None until measured.

    ``failure_rate_before`` / ``failure_rate_after`` are no longer served (the before/after
    comparison is gone): they stay for older code and read None. Fields the server adds later land
    in ``extra`` rather than failing the read. Timestamps are the server's ISO 8601 strings (UTC).
    """

    entry_id: str
    trigger: str
    action: str
    kind: str = "do"
    confidence: float = 0.0
    domain: str | None = None
    scope: str | None = None
    endpoint: str | None = None
    task_class: str | None = None
    signature_id: str | None = None
    source: str | None = None
    distilled_by: str | None = None
    status: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    published_at: str | None = None
    evidence_count: int | None = None
    evidence_agent_count: int | None = None
    evidence_reporter_count: int | None = None
    evidence_op_ids: tuple[str, ...] = ()
    instead_of: str | None = None
    fix_kind: str | None = None
    fix_names: tuple[str, ...] = ()
    fix_failures: int | None = None
    fix_successes: int | None = None
    experiment_stage: str | None = None
    helpful_count: int | None = None
    harmful_count: int | None = None
    treatment_rate: float | None = None
    holdout_rate: float | None = None
    effect: float | None = None
    effect_low: float | None = None
    effect_high: float | None = None
    failure_rate_before: float | None = None  # no longer served: None (an older server's value is read)
    failure_rate_after: float | None = None  # no longer served: None (an older server's value is read)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Any) -> PlaybookEntry | None:
        """An entry from the answer's JSON; None (and a log line) when the essentials are missing."""
        if not isinstance(raw, dict):
            return None
        entry_id, trigger, action = (
            _str(raw.get("entry_id")),
            _str(raw.get("trigger")),
            _str(raw.get("action")),
        )
        if not (entry_id and trigger and action):
            log.warning("opslake: a playbook entry without entry_id, trigger or action was skipped")
            return None
        known = {f.name for f in fields(cls)}
        floats = (
            "confidence", "treatment_rate", "holdout_rate", "effect", "effect_low", "effect_high",
            "failure_rate_before", "failure_rate_after",
        )  # fmt: skip
        ints = (
            "evidence_count",
            "evidence_agent_count",
            "evidence_reporter_count",
            "helpful_count",
            "harmful_count",
            "fix_failures",
            "fix_successes",
        )
        values: dict[str, Any] = {}
        lists = ("evidence_op_ids", "fix_names")
        for name in known - {"entry_id", "trigger", "action", "extra", *lists, *floats, *ints}:
            values[name] = _str(raw.get(name))
        for name in floats:
            values[name] = _float(raw.get(name))
        for name in ints:
            values[name] = _int(raw.get(name))
        values["confidence"] = values["confidence"] or 0.0
        values["kind"] = values["kind"] or "do"
        for name in lists:
            found = raw.get(name)
            values[name] = tuple(i for i in found if isinstance(i, str)) if isinstance(found, list) else ()
        extra = {k: v for k, v in raw.items() if k not in known}
        return cls(entry_id=entry_id, trigger=trigger, action=action, extra=extra, **values)


@dataclass(frozen=True)
class Playbooks:
    """An answer of ``GET /playbooks``: iterate it for the entries (most confident first).

    ``not_modified``: the server answered 304 and these are the cached entries. ``stale``: the
    server could not be read (``error`` says why) and these are the last entries cached for this
    query, or none.
    """

    entries: tuple[PlaybookEntry, ...] = ()
    generated_at: str | None = None
    etag: str | None = None
    not_modified: bool = False
    stale: bool = False
    error: str | None = None

    def __iter__(self) -> Iterator[PlaybookEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def entry_ids(self) -> list[str]:
        return [entry.entry_id for entry in self.entries]


def parse_answer(body: Any, etag: str | None) -> Playbooks:
    """A 200's body; raises ValueError when it is not the playbooks shape."""
    if not isinstance(body, dict) or not isinstance(body.get("entries"), list):
        raise ValueError("the answer has no entries list")
    entries = tuple(e for e in (PlaybookEntry.from_json(raw) for raw in body["entries"]) if e is not None)
    return Playbooks(entries=entries, generated_at=_str(body.get("generated_at")), etag=etag)


class PlaybookCache:
    """The last answer per query, with its ETag (least recently used queries are forgotten)."""

    def __init__(self, max_queries: int = MAX_CACHED_QUERIES) -> None:
        self._answers: OrderedDict[tuple[tuple[str, str], ...], Playbooks] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_queries

    def after_fork(self) -> None:
        """A lock of this process's own (another thread may have held the parent's at the fork)."""
        self._lock = threading.Lock()

    def get(self, key: tuple[tuple[str, str], ...]) -> Playbooks | None:
        with self._lock:
            answer = self._answers.get(key)
            if answer is not None:
                self._answers.move_to_end(key)
            return answer

    def put(self, key: tuple[tuple[str, str], ...], answer: Playbooks) -> None:
        with self._lock:
            self._answers[key] = answer
            self._answers.move_to_end(key)
            while len(self._answers) > self._max:
                self._answers.popitem(last=False)


def query_params(
    endpoint: str | None, task_class: str | None, q: str | None, limit: int | None
) -> dict[str, str]:
    """The query string (only what was given; the server's default limit is 10, at most 50)."""
    params = {"endpoint": endpoint, "task_class": task_class, "q": q}
    out = {k: v for k, v in params.items() if v}
    if limit is not None:
        out["limit"] = str(min(max(int(limit), 1), 50))
    return out


def _get(
    client: httpx.Client, params: dict[str, str], headers: dict[str, str], timeout: float
) -> tuple[int, httpx.Headers, bytes]:
    """One GET, bounded: the whole answer within ``timeout`` (see :mod:`bounded`)."""
    deadline = time.monotonic() + timeout
    with client.stream("GET", PLAYBOOKS_PATH, params=params, headers=headers, timeout=timeout) as answer:
        return answer.status_code, answer.headers, read_bounded(answer, deadline=deadline)


def fetch(
    client: httpx.Client,
    cache: PlaybookCache,
    params: dict[str, str],
    *,
    headers: Mapping[str, str],
    timeout: float,
) -> tuple[Playbooks, bool]:
    """One read, through the cache: (answer, whether the server was reached and answered 200/304).
    Never raises: on failure the answer is the cached one (or empty), marked ``stale``."""
    key = tuple(sorted(params.items()))
    cached = cache.get(key)
    request_headers = dict(headers)
    if cached is not None and cached.etag:
        request_headers["if-none-match"] = cached.etag
    try:
        status, answer_headers, body = _get(client, params, request_headers, timeout)
        if status == 304 and cached is not None:
            return Playbooks(
                entries=cached.entries,
                generated_at=cached.generated_at,
                etag=answer_headers.get("etag") or cached.etag,
                not_modified=True,
            ), True
        if status != 200:
            raise ValueError(f"{status} {body[:200].decode('utf-8', 'replace')}")
        fresh = parse_answer(json.loads(body), answer_headers.get("etag"))
    except (httpx.HTTPError, ValueError, RecursionError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        log.warning(
            "opslake: GET /playbooks failed (%s); returning %s", reason, "cached" if cached else "none"
        )
        base = cached or Playbooks()
        return Playbooks(
            entries=base.entries, generated_at=base.generated_at, etag=base.etag, stale=True, error=reason
        ), False
    cache.put(key, fresh)
    return fresh, True
