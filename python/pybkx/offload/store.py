"""The object store offloaded ledgers go to: an S3-compatible bucket reached through pyarrow's
S3 filesystem (the AWS C++ SDK; no new dependency), keys under the configured prefix. Owns the
requests and the mapping of their failures to ObjectStorageException; it never decides what
is written, nor touches the metadata.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pybkx import errors
from pybkx.config.objectstore import ObjectStorageSettings

if TYPE_CHECKING:
    import pyarrow
    from pyarrow import fs as pafs

__all__ = ["ObjectStore"]

# S3-compatible servers that predate the AWS SDK's default "flexible checksums" (S3Proxy, older
# Ceph and MinIO) refuse the CRC trailers it adds to uploads (XAmzContentSHA256Mismatch); ask for
# checksums only where an operation requires one. The SDK reads these when it builds a client,
# so they are set before the first S3FileSystem; a value the user set wins.
os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")

#: Attempts of one request (the SDK's standard retry strategy, with its backoff).
MAX_REQUEST_ATTEMPTS = 3


def _failure(what: str, exc: Exception) -> errors.ObjectStorageException:
    return errors.ObjectStorageException(f"object storage: {what}: {exc}")


class ObjectStore:
    """One bucket of an S3-compatible server. Every method raises ObjectStorageException when
    the server refuses or does not answer within the request timeout (after
    ``MAX_REQUEST_ATTEMPTS`` attempts); ImportError without pyarrow (``pybkx[arrow]``)."""

    def __init__(self, settings: ObjectStorageSettings) -> None:
        from pyarrow import fs as pafs

        self.settings = settings
        options: dict[str, Any] = {
            "region": settings.region,
            "request_timeout": settings.request_timeout_ms / 1000,
            "connect_timeout": settings.request_timeout_ms / 1000,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=MAX_REQUEST_ATTEMPTS),
            "allow_bucket_creation": True,
        }
        if settings.access_key is not None:
            options["access_key"] = settings.access_key
            options["secret_key"] = settings.secret_key
        if settings.endpoint is not None:
            scheme, _, host = settings.endpoint.partition("://")
            options["scheme"], options["endpoint_override"] = scheme, host
        self.fs: pafs.S3FileSystem = pafs.S3FileSystem(**options)

    def path(self, key: str) -> str:
        """The filesystem path (``bucket/key``) of ``key``."""
        return f"{self.settings.bucket}/{key}"

    def ensure_bucket(self) -> None:
        """Create the bucket unless it exists."""
        from pyarrow import fs as pafs

        try:
            if self.fs.get_file_info(self.settings.bucket).type == pafs.FileType.NotFound:
                self.fs.create_dir(self.settings.bucket)
        except OSError as exc:
            raise _failure(f"bucket {self.settings.bucket!r}", exc) from exc

    def size(self, key: str) -> int | None:
        """The object's size in bytes, None when there is no such object."""
        from pyarrow import fs as pafs

        try:
            info = self.fs.get_file_info(self.path(key))
        except OSError as exc:
            raise _failure(f"stat {key}", exc) from exc
        return None if info.type != pafs.FileType.File else int(info.size)

    def list(self, key_prefix: str) -> list[tuple[str, int]]:
        """(key, size) of every object under ``key_prefix/``, in key order."""
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self.path(key_prefix), allow_not_found=True, recursive=True)
        try:
            infos = self.fs.get_file_info(selector)
        except OSError as exc:
            raise _failure(f"list {key_prefix}/", exc) from exc
        bucket = self.settings.bucket + "/"
        return sorted(
            (i.path.removeprefix(bucket), int(i.size))
            for i in infos
            if i.type == pafs.FileType.File
        )

    def open_output(self, key: str) -> pyarrow.NativeFile:
        """A stream writing the object; it appears whole when the stream is closed (one PUT, or
        a multipart upload completed at close), never part-written."""
        try:
            return self.fs.open_output_stream(self.path(key))
        except OSError as exc:
            raise _failure(f"write {key}", exc) from exc

    def open_input(self, key: str) -> pyarrow.NativeFile:
        """A random-access reader of the object (ranged GETs)."""
        try:
            return self.fs.open_input_file(self.path(key))
        except OSError as exc:
            raise _failure(f"read {key}", exc) from exc

    def put(self, key: str, data: bytes) -> None:
        """Write a small object whole."""
        try:
            with self.fs.open_output_stream(self.path(key)) as out:
                out.write(data)
        except OSError as exc:
            raise _failure(f"write {key}", exc) from exc

    def get(self, key: str) -> bytes:
        """A small object's bytes."""
        try:
            with self.fs.open_input_stream(self.path(key)) as stream:
                return bytes(stream.read())
        except OSError as exc:
            raise _failure(f"read {key}", exc) from exc

    def delete(self, key: str) -> None:
        """Remove the object (no error when it is already gone)."""
        if self.size(key) is None:
            return
        try:
            self.fs.delete_file(self.path(key))
        except OSError as exc:
            raise _failure(f"delete {key}", exc) from exc
