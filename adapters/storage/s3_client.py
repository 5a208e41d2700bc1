"""Where a vault's objects live, and one S3 client per process to reach them.

`ObjectLocation` is `s3://bucket/prefix`, as `--artifacts` and
`SPILLVAULT_ARTIFACTS` give it. The client takes its endpoint, credentials and
region from the standard AWS variables (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, profiles): boto3
reads them itself. Every call has a connect and a read timeout and a bounded
number of attempts, so a server that stops answering is an `ObjectStoreError`
within seconds, never a hang. boto3 rather than obstore: obstore 0.12 cannot
make a multipart upload create-only, delete `If-Match`, or list unfinished
uploads, and the backend needs all three (README, dependencies).
"""

from __future__ import annotations

import errno
import os
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spillvault.domain.errors import ObjectStoreConfigError, ObjectStoreError

if TYPE_CHECKING:
    from collections.abc import Iterator

SCHEME = "s3://"
ARTIFACTS_ENV = "SPILLVAULT_ARTIFACTS"
"""Names a vault's object store: `s3://bucket/prefix`."""
EVENT_STORE_ENV = "SPILLVAULT_EVENT_STORE"
"""Names a vault's PostgreSQL event store: `postgresql://…`."""
CONNECT_TIMEOUT = 5.0
"""Seconds to reach the server before a call fails."""
READ_TIMEOUT = 30.0
"""Seconds a call waits for the server to answer before it fails."""
MAX_TIMEOUT = 3600.0
"""An hour: no call to the store waits longer."""
TIMEOUT_ENV = "SPILLVAULT_S3_TIMEOUT"
"""Overrides `READ_TIMEOUT` (seconds): a slow link may need more, a test less."""
ATTEMPTS = 3
"""Tries per call: a transient error is retried, a dead server fails fast."""
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX_PART = re.compile(r"[A-Za-z0-9._=-]{1,200}")


@dataclass(frozen=True)
class ObjectLocation:
    """A bucket and a key prefix: where one vault keeps its sessions' objects."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> ObjectLocation:
        """Read `s3://bucket[/prefix]`; anything else is an `ObjectStoreConfigError`."""
        if not isinstance(url, str) or not url.startswith(SCHEME):
            msg = f"artifacts location must be s3://bucket[/prefix], not {url!r:.200}"
            raise ObjectStoreConfigError(msg)
        bucket, _, prefix = url[len(SCHEME) :].partition("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            msg = f"not an S3 bucket name: {bucket!r:.100} (in {url!r:.200})"
            raise ObjectStoreConfigError(msg)
        parts = [part for part in prefix.split("/") if part]
        for part in parts:
            if not _PREFIX_PART.fullmatch(part) or part in {".", ".."}:
                msg = (
                    f"key prefix part {part!r:.100} in {url!r:.200}: use letters, "
                    "digits and . _ = - only"
                )
                raise ObjectStoreConfigError(msg)
        return cls(bucket, "/".join(parts))

    @property
    def url(self) -> str:
        """Return the location as `s3://bucket[/prefix]`."""
        return f"{SCHEME}{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def root_prefix(self) -> str:
        """Return the key prefix every session's keys start with ("" or "p/")."""
        return f"{self.prefix}/" if self.prefix else ""

    def session_prefix(self, session_id: str) -> str:
        """Return the key prefix every object of one session starts with."""
        return f"{self.root_prefix}{session_id}/"

    def key(self, session_id: str, filename: str) -> str:
        """Return the key of one artifact's object."""
        return self.session_prefix(session_id) + filename


def artifacts_from_environment() -> ObjectLocation | None:
    """Return the location `SPILLVAULT_ARTIFACTS` names, if it names one."""
    value = os.environ.get(ARTIFACTS_ENV, "").strip()
    return ObjectLocation.parse(value) if value else None


_clients: dict[tuple[str | None, float, int], Any] = {}
_clients_mutex = threading.Lock()


def s3_client() -> Any:
    """Return this process's S3 client for the endpoint the environment names.

    boto3 clients are thread-safe; one per endpoint and process keeps its
    connection pool warm. A fork gets a client of its own.
    """
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get(
        "AWS_ENDPOINT_URL"
    )
    timeout = read_timeout()
    key = (endpoint, timeout, os.getpid())
    with _clients_mutex:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _new_client(endpoint, timeout)
        return client


def read_timeout() -> float:
    """Return the read timeout `$SPILLVAULT_S3_TIMEOUT` sets, else `READ_TIMEOUT`."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return READ_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_TIMEOUT:
        msg = f"${TIMEOUT_ENV} must be seconds in (0, 3600], not {value!r:.50}"
        raise ObjectStoreConfigError(msg)
    return seconds


def _new_client(endpoint: str | None, timeout: float) -> Any:
    try:
        import boto3  # noqa: PLC0415 - optional extra, costly import
        from botocore.config import Config  # noqa: PLC0415
    except ImportError as error:
        msg = "an object store needs the extra: pip install 'spillvault[s3]'"
        raise ObjectStoreConfigError(msg) from error
    config = Config(
        connect_timeout=min(CONNECT_TIMEOUT, timeout),
        read_timeout=timeout,
        retries={"max_attempts": ATTEMPTS, "mode": "standard"},
        # A custom endpoint (SeaweedFS, MinIO, Ceph) is usually an IP or a
        # single host name: bucket-in-path addressing is the one that works.
        s3={"addressing_style": "path" if endpoint else "auto"},
        # We send the SHA-256 we computed; botocore need not add a CRC of its own.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        max_pool_connections=16,
    )
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    try:
        return boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            region_name=region or "us-east-1",
            config=config,
        )
    except Exception as error:
        msg = f"cannot make an S3 client for {endpoint or 'AWS'}: {error}"
        raise ObjectStoreConfigError(msg) from error


def status_of(error: BaseException) -> int | None:
    """Return the HTTP status of a botocore `ClientError`, if it is one."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if isinstance(status, int) else None


class PreconditionFailedError(ObjectStoreError):
    """The server refused a conditional request (`If-None-Match`, `If-Match`)."""


@contextmanager
def object_call(what: str) -> Iterator[None]:
    """Turn botocore's errors into ours: 404 `FileNotFoundError`, 412, the rest."""
    try:
        from botocore.exceptions import (  # noqa: PLC0415 - optional extra
            BotoCoreError,
            ClientError,
        )
    except ImportError as error:  # pragma: no cover - checked when the client is made
        raise ObjectStoreConfigError(str(error)) from error
    try:
        yield
    except ClientError as error:
        status = status_of(error)
        code = error.response.get("Error", {}).get("Code", "")
        if status == 404 or code in {"NoSuchKey", "NotFound", "NoSuchUpload"}:
            raise FileNotFoundError(errno.ENOENT, f"{what}: no such object") from error
        if status == 412 or code == "PreconditionFailed":
            msg = f"{what}: precondition failed"
            raise PreconditionFailedError(errno.EEXIST, msg) from error
        msg = f"{what}: the object store refused ({code or status}): {error}"
        raise ObjectStoreError(errno.EIO, msg) from error
    except BotoCoreError as error:
        msg = f"{what}: the object store did not answer: {error}"
        raise ObjectStoreError(errno.EIO, msg) from error


__all__ = [
    "ARTIFACTS_ENV",
    "ATTEMPTS",
    "CONNECT_TIMEOUT",
    "EVENT_STORE_ENV",
    "READ_TIMEOUT",
    "TIMEOUT_ENV",
    "ObjectLocation",
    "PreconditionFailedError",
    "artifacts_from_environment",
    "object_call",
    "read_timeout",
    "s3_client",
    "status_of",
]
