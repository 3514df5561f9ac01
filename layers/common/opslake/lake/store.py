"""Object storage behind a small interface: the writer only ever puts whole objects."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class ObjectStore(ABC):
    @abstractmethod
    def put(self, key: str, data: bytes, *, content_type: str) -> None:
        """Write (or overwrite) one object; raise on failure."""


class S3ObjectStore(ObjectStore):
    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self.bucket = bucket

    def put(self, key: str, data: bytes, *, content_type: str) -> None:
        self._client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
