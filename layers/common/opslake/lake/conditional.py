"""One JSON object in S3 that only ever changes by conditional writes: the primitive under every lease.

A scheduled job's run state (:mod:`opslake.jobs.lease`) and a partition's compaction journal
(:mod:`opslake.lake.compaction.journal`) are both such objects in the lake bucket. The primitive
lives in ``lake/`` so that compaction, which the jobs run, need not import the jobs package.
Only botocore is imported: safe wherever boto3 is.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

__all__ = [
    "CONFLICT_CODES",
    "MISSING_CODES",
    "ConditionalJson",
    "StateError",
    "error_code",
    "lease_is_held",
]

#: What S3 answers when a conditional request's ``IfMatch``/``IfNoneMatch`` does not hold.
CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})
#: What S3 answers when the object does not exist.
MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


class StateError(Exception):
    """The state object could not be read or written (S3 failed, or its content is not JSON)."""


def error_code(exc: ClientError) -> str:
    """The service's error code, or the HTTP status when an answer (a conditional write's) has none."""
    response = exc.response
    return str(response.get("Error", {}).get("Code", "")) or str(
        response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    )


class ConditionalJson:
    """One JSON object in S3 that only ever changes by conditional writes.

    ``write`` succeeds only if the object still has the ETag the writer read (``IfMatch``), or
    does not exist yet (``IfNoneMatch="*"``); S3 lets exactly one of two racing writers win. Every
    lease in opslake (a job's run state, a compaction journal) is built on this one primitive.
    """

    def __init__(self, s3: Any, bucket: str, key: str) -> None:
        self._s3 = s3
        self.bucket = bucket
        self.key = key

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def read(self) -> tuple[Any, str | None]:
        """The parsed document and its ETag; ``(None, None)`` when there is no object yet."""
        try:
            response = self._s3.get_object(Bucket=self.bucket, Key=self.key)
            body = response["Body"].read()
        except ClientError as exc:
            if error_code(exc) in MISSING_CODES:
                return None, None
            raise StateError(f"{self.uri} could not be read: {exc}") from exc
        try:
            return json.loads(body), str(response["ETag"])
        except ValueError as exc:
            # Refuse to go on rather than overwrite a document we cannot read: a human must look.
            raise StateError(f"{self.uri} is not a valid state object: {exc}") from exc

    def write(self, body: bytes, etag: str | None) -> str | None:
        """Write ``body`` if the object still has ``etag`` (or is absent when ``etag`` is None);
        the new ETag, or ``None`` when another writer changed it first."""
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            response = self._s3.put_object(
                Bucket=self.bucket, Key=self.key, Body=body, ContentType="application/json", **condition
            )
        except ClientError as exc:
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if error_code(exc) in CONFLICT_CODES or status in CONFLICT_CODES:  # 409/412 whatever the code
                return None
            raise StateError(f"{self.uri} could not be written: {exc}") from exc
        return str(response["ETag"])


def lease_is_held(holder: str | None, expires: datetime | None, now: datetime) -> bool:
    """Whether a lease recorded as ``holder`` until ``expires`` still keeps others out at ``now``."""
    return bool(holder) and expires is not None and expires > now
