"""The object-storage cold tier's keys (pybkx's own: BookKeeper has no such tier): the S3
endpoint, bucket, credentials and prefix a bookie offloads closed ledgers to, as a base of
``ServerConfig``, and the settings object built from them. Data and parsing only; the offloader
(``pybkx.offload``) applies them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from pybkx.config.values import MIB, InvalidValue, integer, optional_str, setting

__all__ = ["ObjectStorageKeys", "ObjectStorageSettings", "endpoint"]

DEFAULT_ROW_GROUP_BYTES: Final = MIB


def endpoint(value: object) -> str | None:
    """``http://host:port`` or ``https://host:port`` (a path is refused); blank: none."""
    text = optional_str(value)
    if text is None:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise InvalidValue(f"expected http(s)://host[:port], got {text!r}")
    return f"{parts.scheme}://{parts.netloc}"


def _prefix(value: object) -> str:
    text = (optional_str(value) or "").strip("/")
    if any(part in ("", ".", "..") for part in text.split("/")) and text:
        raise InvalidValue(f"expected a key prefix such as pybkx/cold, got {value!r}")
    return text


@dataclass(frozen=True)
class ObjectStorageSettings:
    """Where offloaded ledgers go: an S3-compatible ``endpoint`` (None: AWS's own for
    ``region``), its ``bucket``, the key ``prefix`` (no slashes at either end; may be empty),
    credentials (None: the AWS SDK's default chain), the Parquet row-group size in payload bytes
    and the timeout of one request."""

    bucket: str
    endpoint: str | None = None
    prefix: str = "pybkx"
    region: str = "us-east-1"
    access_key: str | None = None
    secret_key: str | None = None
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    request_timeout_ms: int = 30_000

    def key(self, *parts: str) -> str:
        """The object key of ``parts`` under the prefix."""
        return "/".join(p for p in (self.prefix, *parts) if p)


@dataclass(frozen=True)
class ObjectStorageKeys:
    """The ``objectStorage*`` keys of a bookie (a base of ``ServerConfig``); offload is on once
    ``objectStorageBucket`` is set."""

    object_storage_endpoint: str | None = setting("objectStorageEndpoint", None, endpoint)
    """An S3-compatible server, ``http(s)://host:port``; unset: AWS S3 in the region."""
    object_storage_region: str = setting("objectStorageRegion", "us-east-1", str)
    object_storage_bucket: str | None = setting("objectStorageBucket", None, optional_str)
    """The bucket offloaded ledgers go to (created if missing); unset: no offload."""
    object_storage_prefix: str = setting("objectStoragePrefix", "pybkx", _prefix)
    """Every object key starts with it (``<prefix>/ledgers/...``)."""
    object_storage_access_key: str | None = setting("objectStorageAccessKey", None, optional_str)
    object_storage_secret_key: str | None = setting("objectStorageSecretKey", None, optional_str)
    """With the access key: static credentials; both unset: the AWS SDK's default chain."""
    object_storage_row_group_bytes: int = setting(
        "objectStorageRowGroupBytes", DEFAULT_ROW_GROUP_BYTES, integer(4096)
    )
    """Payload bytes per Parquet row group: the unit of a ranged read of an offloaded ledger."""
    object_storage_request_timeout_ms: int = setting(
        "objectStorageRequestTimeoutMs", 30_000, integer(1)
    )

    def object_storage(self) -> ObjectStorageSettings | None:
        """The settings, or None when ``objectStorageBucket`` is unset. Raises InvalidValue for
        one credential without the other."""
        if self.object_storage_bucket is None:
            return None
        if (self.object_storage_access_key is None) != (self.object_storage_secret_key is None):
            raise InvalidValue(
                "objectStorageAccessKey and objectStorageSecretKey go together (or neither)"
            )
        return ObjectStorageSettings(
            bucket=self.object_storage_bucket,
            endpoint=self.object_storage_endpoint,
            prefix=self.object_storage_prefix,
            region=self.object_storage_region,
            access_key=self.object_storage_access_key,
            secret_key=self.object_storage_secret_key,
            row_group_bytes=self.object_storage_row_group_bytes,
            request_timeout_ms=self.object_storage_request_timeout_ms,
        )
