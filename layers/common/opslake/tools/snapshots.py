"""Small JSON state objects in the lake (playbook snapshot, LLM state), read with a per-container cache.

A reader keeps the last copy for ``ttl_s``; after that it asks S3 again with ``IfNoneMatch`` on the
copy's ETag, so an unchanged object costs a 304 and no download. A missing object is a normal
answer (``None``). If S3 fails and a copy is cached, the copy is served (stale beats an error).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from opslake.observability import logger

if TYPE_CHECKING:
    from opslake.config import Settings
    from opslake.models.playbooks import PlaybookSnapshot

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_NOT_MODIFIED = frozenset({"304", "NotModified"})


class SnapshotUnavailableError(Exception):
    """S3 could not be read and no copy was cached."""


@dataclass
class _Copy:
    value: Any
    etag: str | None
    checked_at: float


class CachedJsonObject:
    """One S3 object parsed as JSON by ``parse``, re-checked at most every ``ttl_s`` seconds."""

    def __init__(
        self,
        client_factory: Callable[[], Any],
        bucket: str,
        key: str,
        parse: Callable[[Any], Any],
        *,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_factory = client_factory
        self._bucket = bucket
        self._key = key
        self._parse = parse
        self._ttl_s = ttl_s
        self._clock = clock
        self._copy: _Copy | None = None
        self.reads = 0  # downloads (for tests and metrics)

    def get(self) -> Any:
        now = self._clock()
        if self._copy is not None and now - self._copy.checked_at < self._ttl_s:
            return self._copy.value
        arguments: dict[str, Any] = {"Bucket": self._bucket, "Key": self._key}
        if self._copy is not None and self._copy.etag:
            arguments["IfNoneMatch"] = self._copy.etag
        try:
            response = self._client_factory().get_object(**arguments)
            body = response["Body"].read()
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if (code in _NOT_MODIFIED or status == 304) and self._copy is not None:
                self._copy.checked_at = now
                return self._copy.value
            if code in _MISSING or status == 404:
                self._copy = _Copy(None, None, now)
                return None
            return self._stale_or_raise(f"{code}: {exc}")
        except BotoCoreError as exc:
            return self._stale_or_raise(str(exc))
        self.reads += 1
        try:
            value = self._parse(json.loads(body))
        except ValueError as exc:  # not JSON, or not the contract: a producer's bug
            logger.error("invalid state object", key=self._key, error=str(exc)[:500])
            return self._stale_or_raise(f"invalid content: {str(exc)[:200]}")
        self._copy = _Copy(value, response.get("ETag"), now)
        return value

    def _stale_or_raise(self, reason: str) -> Any:
        if self._copy is not None:
            logger.warning("serving a cached copy: S3 read failed", key=self._key, error=reason)
            return self._copy.value
        raise SnapshotUnavailableError(f"s3://{self._bucket}/{self._key} could not be read: {reason}")


def parse_playbook_snapshot(document: Any) -> PlaybookSnapshot:
    """The consolidator's playbook snapshot, keeping every valid entry (one bad entry must not hide
    the others); ``GET /playbooks`` and ``POST /search`` read it with this."""
    from opslake.models.playbooks import PlaybookEntry, PlaybookSnapshot

    if not isinstance(document, dict) or "generated_at" not in document:
        # a ValueError, so the cache serves its last good copy or answers 503, not a 500
        raise ValueError("a playbook snapshot is a JSON object with generated_at and entries")
    entries = []
    for raw in document.get("entries") or []:
        try:
            entries.append(PlaybookEntry.model_validate(raw))
        except ValueError as exc:
            logger.warning("playbook entry skipped", error=str(exc)[:300])
    return PlaybookSnapshot(generated_at=document["generated_at"], entries=entries)


def playbook_snapshot(client_factory: Callable[[], Any], settings: Settings) -> CachedJsonObject:
    """The playbook snapshot as ``GET /playbooks`` serves it and ``POST /search`` searches it: one
    object, one cache policy and one parser, so search finds what agents are served."""
    return CachedJsonObject(
        client_factory,
        settings.lake_bucket,
        settings.playbooks_key,
        parse_playbook_snapshot,
        ttl_s=settings.snapshot_cache_s,
    )
