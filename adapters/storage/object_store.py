"""The object-store artifact store: artifacts as S3 objects, immutable without rename.

An artifact's key is `<prefix>/<session-id>/<filename>`; its number comes from
the session's event store, so hosts sharing a vault never pick the same one.
An output that fits one part is sent in one `PutObject`; a longer one as a
multipart upload, parts of `PART_SIZE` uploaded as the output arrives. Both are
create-only (`If-None-Match: *`) and carry the SHA-256 the server checks (of
the whole object, or of each part), so a body damaged on the way or a key
already taken is refused by the server, never overwritten. Until the put or
the multipart completion succeeds nothing is visible under the key; any
failure aborts the upload, and an upload a crash left behind is aborted by
`abort_stale_uploads`. Only then is the artifact's event recorded, with the
ETag and checksum the server returned, which GC compares before it deletes.

Reads are ranged GETs of the 1 MiB chunks they touch, each verified against
its recorded digest by the reader. A stream is spooled to an unnamed private
file while it is written (parts go up as they fill) and is readable from the
store object that writes it; other hosts see it once it is sealed.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import logging
import os
import tempfile
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from spillvault.adapters.storage.artifact_names import SessionArtifactNames
from spillvault.adapters.storage.content_writer import ContentHasher, summary_for
from spillvault.adapters.storage.s3_client import (
    PreconditionFailedError,
    object_call,
)
from spillvault.domain.artifact import Artifact, StoredObject
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.enums import ArtifactState
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ObjectStoreError,
)
from spillvault.domain.handles import MAX_ARTIFACT_NUMBER
from spillvault.domain.summary import check_summary
from spillvault.domain.values import (
    ArtifactReference,
    artifact_filename,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType

    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.adapters.storage.s3_client import ObjectLocation
    from spillvault.domain.artifact import ArtifactContent
    from spillvault.domain.command import CommandFacts
    from spillvault.domain.ports import KeyLineScanner

logger = logging.getLogger(__name__)

PART_SIZE = 8 * CHUNK_SIZE
"""Bytes per multipart part (S3's least is 5 MiB; 10,000 parts make 80 GiB)."""
PARTS_IN_FLIGHT = 2
"""Parts uploading at once while the caller hashes the next."""
_KEY_ATTEMPTS = 64
STALE_UPLOAD_AGE = timedelta(hours=24)
"""An unfinished upload older than this is a crash's leftover, never a writer's."""


def _as_bytes(chunk: object) -> bytes:
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, bytearray | memoryview):
        return bytes(chunk)
    msg = f"artifact chunks must be bytes, not {type(chunk).__name__}"
    raise TypeError(msg)


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def checksum_of_whole(content_sha256: str) -> str:
    """Return the S3 checksum string of a single-part object with this digest."""
    return _b64(binascii.unhexlify(content_sha256))


class ObjectArtifactStore(SessionArtifactNames):
    """A session's artifacts as objects under `<prefix>/<session-id>/` (S2, S2.7)."""

    def __init__(
        self, session: SessionHandles, location: ObjectLocation, client: Any
    ) -> None:
        self._session = session
        self._location = location
        self._client = client
        self._closed = False
        self._streams: dict[str, ObjectArtifactStream] = {}
        self._streams_mutex = threading.Lock()

    # life cycle -------------------------------------------------------------

    @property
    def session(self) -> SessionHandles:
        """The session this store writes into."""
        return self._session

    @property
    def location(self) -> ObjectLocation:
        """Where the vault keeps its objects."""
        return self._location

    @property
    def client(self) -> Any:
        """The S3 client calls go through."""
        return self._client

    def close(self) -> None:
        """Stop storing (idempotent); the shared client stays open."""
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            msg = "artifact store is closed"
            raise ValueError(msg)

    def key(self, filename: str) -> str:
        """Return the object key of an artifact of this session."""
        return self._location.key(self._session.session_id, filename)

    # handles (S1.5, S3.2) ---------------------------------------------------

    def resolve(self, handle: str) -> str:
        """Return the filename `handle` names, if it is an artifact of this session.

        Accepted: the handle `<session-id>/<number>` and the artifact's source
        id. A path is refused: this session's artifacts are objects, not files.
        """
        return self._parse(handle)

    def _parse_path(self, handle: str) -> str:
        msg = (
            f"artifact path {handle[:300]!r} names a local file; this session's "
            f"artifacts are objects in {self._location.url}: use the handle"
        )
        raise ArtifactAccessError(msg)

    def reference_for(self, artifact: Artifact) -> ArtifactReference:
        """Return the S4.1 reference of a stored (not open) artifact."""
        return self._reference(artifact, None)

    # reading (S3) -----------------------------------------------------------

    def open_for_read(self, handle_or_filename: str) -> ObjectBlob | SpoolBlob:
        """Open an artifact for ranged reads (a stream this store writes: its spool)."""
        filename = self._parse_name(handle_or_filename)
        with self._streams_mutex:
            stream = self._streams.get(filename)
        if stream is not None:
            blob = stream.spool_blob()
            if blob is not None:
                return blob
        artifact = self._session.store.get_artifact(filename)
        if artifact is None:
            raise FileNotFoundError(errno.ENOENT, f"{filename}: no such artifact")
        content = artifact.stored_content
        if content is None:
            msg = (
                f"{filename} is still being written on another host: an object "
                "store shows a stream once it is sealed"
            )
            raise ArtifactAccessError(msg)
        return ObjectBlob(self, filename, content.size_bytes)

    def confirm(self, filename: str, content: ArtifactContent) -> None:
        """HEAD the object: its size, ETag and checksum must be what was recorded."""
        artifact = self._session.store.get_artifact(filename)
        facts = None if artifact is None else artifact.object_facts
        head = self.head(filename)
        expected_checksum = (
            facts.checksum_sha256
            if facts is not None
            else checksum_of_whole(content.content_sha256)
        )
        problems = []
        if head["size"] != content.size_bytes:
            problems.append(f"{head['size']} bytes, {content.size_bytes} recorded")
        if head["checksum"] != expected_checksum:
            problems.append(f"checksum {head['checksum']!r}, {expected_checksum!r}")
        if facts is not None and head["etag"] != facts.etag:
            problems.append(f"ETag {head['etag']}, {facts.etag} recorded")
        recorded = None if artifact is None else artifact.stored_content
        if recorded is not None and recorded.content_sha256 != content.content_sha256:
            problems.append("the recorded digest is another one")
        if problems:
            msg = f"{filename} is not the recorded object: " + "; ".join(problems)
            raise ArtifactIntegrityError(msg)

    def head(self, filename: str) -> dict[str, Any]:
        """Return the object's size, ETag and SHA-256 checksum as the server says."""
        key = self.key(filename)
        with object_call(f"HEAD {key}"):
            answer = self._client.head_object(
                Bucket=self._location.bucket, Key=key, ChecksumMode="ENABLED"
            )
        return {
            "size": int(answer["ContentLength"]),
            "etag": str(answer.get("ETag", "")),
            "checksum": str(answer.get("ChecksumSHA256", "")),
            "version_id": answer.get("VersionId"),
        }

    def get_range(self, filename: str, start: int, size: int) -> bytes:
        """Return the bytes `[start, start + size)` of an artifact's object."""
        if size <= 0:
            return b""
        key = self.key(filename)
        with object_call(f"GET {key}"):
            answer = self._client.get_object(
                Bucket=self._location.bucket,
                Key=key,
                Range=f"bytes={start}-{start + size - 1}",
            )
            body = answer["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

    # storing a whole output (S2.4, A2, A3) ----------------------------------

    def store(  # noqa: PLR0913 - the fields S2.3 records
        self,
        chunks: Iterable[bytes],
        *,
        source_tool: str,
        tool_use_id: str | None = None,
        is_error: bool = False,
        summary: str | None = None,
        key_line_scanner: KeyLineScanner | None = None,
        command: CommandFacts | None = None,
    ) -> Artifact:
        """Upload `chunks` create-only as a new sealed artifact, then record it.

        On any failure nothing is left: an upload is aborted, an object whose
        event could not be recorded is deleted (`If-Match` its ETag), and the
        error propagates.
        """
        if summary is not None:
            summary = check_summary(summary)
        self._check_open()
        self._session.check_writable("store an artifact")
        captured_at = self._session.clock.now()
        upload = _Upload(self, key_line_scanner)
        try:
            for chunk in chunks:
                upload.write(_as_bytes(chunk))
            content, first_line = upload.hasher.finish()
            filename, facts = upload.publish()
            artifact = Artifact.store(
                filename,
                content,
                source_tool=source_tool,
                tool_use_id=tool_use_id,
                is_error=is_error,
                captured_at=captured_at,
                summary=summary or summary_for(content, first_line),
                command=command,
                stored_object=facts,
            )
            self._session.store.save_aggregates(artifact)
        except BaseException:
            upload.discard()
            raise
        return artifact

    def reserve_name(self) -> str:
        """Take a number from the event store: no host of the vault gets it again."""
        number = self._session.store.reserve_artifact_number(at_least=1)
        if number > MAX_ARTIFACT_NUMBER:
            msg = f"artifact numbers exhausted ({number} > {MAX_ARTIFACT_NUMBER})"
            raise OSError(errno.ENOSPC, msg)
        return artifact_filename(number)

    # streaming (S2.4) -------------------------------------------------------

    def open_stream(
        self,
        source_tool: str,
        *,
        tool_use_id: str | None = None,
        key_line_scanner: KeyLineScanner | None = None,
    ) -> ObjectArtifactStream:
        """Start a stream: spooled here, uploaded as it grows, recorded `open`."""
        self._check_open()
        self._session.check_writable("store an artifact")
        opened_at = self._session.clock.now()
        filename = self.reserve_name()
        artifact = Artifact.open_stream(
            filename,
            source_tool=source_tool,
            tool_use_id=tool_use_id,
            opened_at=opened_at,
        )
        stream = ObjectArtifactStream(self, artifact, key_line_scanner)
        try:
            self._session.store.save_aggregates(artifact)
        except BaseException:
            stream.drop_spool()
            raise
        with self._streams_mutex:
            self._streams[filename] = stream
        return stream

    def stream_ended(self, filename: str) -> None:
        """Forget a sealed stream: reads go to its object from now on."""
        with self._streams_mutex:
            self._streams.pop(filename, None)

    # leftovers --------------------------------------------------------------

    def abort_stale_uploads(self, now: datetime) -> list[str]:
        """Abort this session's unfinished uploads older than `STALE_UPLOAD_AGE`."""
        prefix = self._location.session_prefix(self._session.session_id)
        aborted = []
        for upload in self.unfinished_uploads():
            if now - upload["Initiated"] < STALE_UPLOAD_AGE:
                continue
            with object_call(f"abort upload of {upload['Key']}"):
                self._client.abort_multipart_upload(
                    Bucket=self._location.bucket,
                    Key=upload["Key"],
                    UploadId=upload["UploadId"],
                )
            aborted.append(upload["Key"][len(prefix) :])
        return aborted

    def unfinished_uploads(self) -> list[dict[str, Any]]:
        """Return this session's multipart uploads never completed nor aborted."""
        prefix = self._location.session_prefix(self._session.session_id)
        found: list[dict[str, Any]] = []
        marker: dict[str, str] = {}
        while True:
            with object_call(f"list uploads under {prefix}"):
                page = self._client.list_multipart_uploads(
                    Bucket=self._location.bucket, Prefix=prefix, **marker
                )
            found.extend(page.get("Uploads", []))
            if not page.get("IsTruncated"):
                return found
            marker = {
                "KeyMarker": page["NextKeyMarker"],
                "UploadIdMarker": page["NextUploadIdMarker"],
            }

    def object_names(self) -> list[str]:
        """Return the names of every object under this session's prefix, sorted."""
        return [listed.name for listed in self.list_objects()]

    def list_objects(self) -> list[ListedObject]:
        """Return every object under this session's prefix, sorted by name."""
        prefix = self._location.session_prefix(self._session.session_id)
        found: list[ListedObject] = []
        token: dict[str, str] = {}
        while True:
            with object_call(f"list {prefix}"):
                page = self._client.list_objects_v2(
                    Bucket=self._location.bucket, Prefix=prefix, **token
                )
            found.extend(
                ListedObject(
                    name=item["Key"][len(prefix) :],
                    size=int(item["Size"]),
                    etag=str(item.get("ETag", "")),
                    last_modified=item["LastModified"],
                )
                for item in page.get("Contents", [])
            )
            if not page.get("IsTruncated"):
                return sorted(found, key=lambda listed: listed.name)
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def read_whole(self, filename: str) -> tuple[ArtifactContent, StoredObject]:
        """GET an object whole, hashing it as a store would (for adoption, S6.1)."""
        head = self.head(filename)
        key = self.key(filename)
        hasher = ContentHasher()
        with object_call(f"GET {key}"):
            answer = self._client.get_object(
                Bucket=self._location.bucket, Key=key, IfMatch=head["etag"]
            )
            body = answer["Body"]
            try:
                while data := body.read(CHUNK_SIZE):
                    hasher.update(data)
            finally:
                body.close()
        content, _ = hasher.finish()
        parts = head["checksum"].rpartition("-")[2] if "-" in head["checksum"] else "1"
        facts = StoredObject(
            etag=head["etag"],
            checksum_sha256=head["checksum"]
            or checksum_of_whole(content.content_sha256),
            parts=int(parts) if parts.isdigit() else 1,
        )
        return content, facts

    def delete_if_match(self, filename: str, etag: str) -> None:
        """Delete the object only if it still has `etag` (412 otherwise)."""
        key = self.key(filename)
        with object_call(f"DELETE {key}"):
            self._client.delete_object(
                Bucket=self._location.bucket, Key=key, IfMatch=etag
            )


def vault_session_ids(location: ObjectLocation, client: Any) -> list[str]:
    """Return the ids of the sessions that have objects under `location`, sorted."""
    prefix = location.root_prefix
    names: list[str] = []
    token: dict[str, str] = {}
    while True:
        with object_call(f"list sessions in {location.url}"):
            page = client.list_objects_v2(
                Bucket=location.bucket, Prefix=prefix, Delimiter="/", **token
            )
        names.extend(
            entry["Prefix"][len(prefix) :].rstrip("/")
            for entry in page.get("CommonPrefixes", [])
        )
        if not page.get("IsTruncated"):
            return sorted(names)
        token = {"ContinuationToken": page["NextContinuationToken"]}


@dataclass(frozen=True)
class ListedObject:
    """One object a listing found: its name under the session, size, ETag, age."""

    name: str
    size: int
    etag: str
    last_modified: datetime


class ObjectBlob:
    """A sealed artifact's object: ranged GETs, each of what the reader asks."""

    def __init__(self, store: ObjectArtifactStore, filename: str, size: int) -> None:
        self._store = store
        self._filename = filename
        self.size = size

    def read_at(self, offset: int, size: int) -> bytes:
        """Return at most `size` bytes at `offset` (one ranged GET)."""
        size = min(size, self.size - offset)
        if size <= 0:
            return b""
        try:
            return self._store.get_range(self._filename, offset, size)
        except FileNotFoundError:
            msg = f"{self._filename} is missing from the object store"
            raise ArtifactIntegrityError(msg) from None

    def close(self) -> None:
        """Nothing is held between reads."""


class SpoolBlob:
    """An open stream's bytes so far, read from its private spool file."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self.size = size

    def read_at(self, offset: int, size: int) -> bytes:
        """Return at most `size` bytes at `offset` (never past the size at open)."""
        size = min(size, self.size - offset)
        parts: list[bytes] = []
        got = 0
        while got < size:
            part = os.pread(self._fd, size - got, offset + got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def close(self) -> None:
        """Close this blob's own descriptor of the spool (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _Upload:
    """One object being uploaded: hashed on the caller's thread, sent on another.

    Bytes collect in a buffer until a part is full; a full part goes to a
    helper thread that takes its SHA-256 and uploads it while the caller
    hashes the next. At most `PARTS_IN_FLIGHT` parts are in flight, so memory
    stays within a few parts. A key is taken when the first part leaves (a
    multipart upload needs it from the start) or, for a small output, at the put.
    """

    def __init__(
        self,
        store: ObjectArtifactStore,
        scanner: KeyLineScanner | None,
        *,
        filename: str | None = None,
    ) -> None:
        self._store = store
        self._client = store.client
        self._bucket = store.location.bucket
        self._scanner = scanner
        self.hasher = ContentHasher()
        self._buffer = bytearray()
        self.filename = filename
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._pending: deque[Future[dict[str, Any]]] = deque()
        self._pool: ThreadPoolExecutor | None = None
        self._published: StoredObject | None = None

    def write(self, data: bytes) -> None:
        """Hash `data`, feed the scanner, and send every part it fills."""
        newlines = self.hasher.update(data)
        if self._scanner is not None:
            self._scanner.feed(data, newlines)
        self._buffer += data
        while len(self._buffer) > PART_SIZE:
            # Strictly more than a part: the last part must exist and be the
            # only one that may be short.
            part = bytes(self._buffer[:PART_SIZE])
            del self._buffer[:PART_SIZE]
            self._send_part(part)

    def _send_part(self, part: bytes) -> None:
        if self._upload_id is None:
            self._begin_multipart()
        while len(self._pending) >= PARTS_IN_FLIGHT:
            self._parts.append(self._pending.popleft().result())
        number = len(self._parts) + len(self._pending) + 1
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                PARTS_IN_FLIGHT, thread_name_prefix="spillvault-upload"
            )
        self._pending.append(self._pool.submit(self._upload_part, number, part))

    def _begin_multipart(self) -> None:
        if self.filename is None:
            self.filename = self._store.reserve_name()
        key = self._store.key(self.filename)
        with object_call(f"start upload of {key}"):
            answer = self._client.create_multipart_upload(
                Bucket=self._bucket, Key=key, ChecksumAlgorithm="SHA256"
            )
        self._upload_id = str(answer["UploadId"])

    def _upload_part(self, number: int, part: bytes) -> dict[str, Any]:
        assert self.filename is not None  # noqa: S101 - set by _begin_multipart
        key = self._store.key(self.filename)
        checksum = _b64(hashlib.sha256(part).digest())
        with object_call(f"upload part {number} of {key}"):
            answer = self._client.upload_part(
                Bucket=self._bucket,
                Key=key,
                UploadId=self._upload_id,
                PartNumber=number,
                Body=part,
                ChecksumSHA256=checksum,
            )
        return {
            "PartNumber": number,
            "ETag": answer["ETag"],
            "ChecksumSHA256": answer.get("ChecksumSHA256", checksum),
        }

    def _wait_pending(self) -> None:
        while self._pending:
            self._parts.append(self._pending.popleft().result())

    def publish(self) -> tuple[str, StoredObject]:
        """Make the object visible, create-only; return its name and its facts."""
        if self._upload_id is None:
            return self._put_whole()
        self._send_part(bytes(self._buffer))
        self._buffer.clear()
        self._wait_pending()
        self._shutdown()
        assert self.filename is not None  # noqa: S101 - set by _begin_multipart
        key = self._store.key(self.filename)
        with object_call(f"complete upload of {key}"):
            answer = self._client.complete_multipart_upload(
                Bucket=self._bucket,
                Key=key,
                UploadId=self._upload_id,
                MultipartUpload={"Parts": self._parts},
                IfNoneMatch="*",
            )
        self._upload_id = None
        self._published = StoredObject(
            etag=str(answer["ETag"]),
            checksum_sha256=str(
                answer.get("ChecksumSHA256") or self._composite_checksum()
            ),
            parts=len(self._parts),
        )
        return self.filename, self._published

    def _composite_checksum(self) -> str:
        digests = b"".join(base64.b64decode(p["ChecksumSHA256"]) for p in self._parts)
        return f"{_b64(hashlib.sha256(digests).digest())}-{len(self._parts)}"

    def _put_whole(self) -> tuple[str, StoredObject]:
        body = bytes(self._buffer)
        content, _ = self.hasher.finish()
        checksum = checksum_of_whole(content.content_sha256)
        fixed = self.filename is not None
        for _ in range(1 if fixed else _KEY_ATTEMPTS):
            filename = self.filename if fixed else self._store.reserve_name()
            assert filename is not None  # noqa: S101 - fixed or just reserved
            key = self._store.key(filename)
            try:
                with object_call(f"PUT {key}"):
                    answer = self._client.put_object(
                        Bucket=self._bucket,
                        Key=key,
                        Body=body,
                        ChecksumSHA256=checksum,
                        IfNoneMatch="*",
                    )
            except PreconditionFailedError:
                if fixed:
                    raise
                continue  # an object nobody recorded holds the key: next number
            self.filename = filename
            self._published = StoredObject(
                etag=str(answer["ETag"]),
                checksum_sha256=str(answer.get("ChecksumSHA256") or checksum),
                parts=1,
            )
            return filename, self._published
        msg = "every reserved artifact key was taken"
        raise ObjectStoreError(errno.EEXIST, msg)

    def discard(self) -> None:
        """Undo what was sent: abort an upload, delete a published object."""
        self._shutdown()
        if self.filename is None:
            return
        key = self._store.key(self.filename)
        try:
            if self._upload_id is not None:
                with object_call(f"abort upload of {key}"):
                    self._client.abort_multipart_upload(
                        Bucket=self._bucket, Key=key, UploadId=self._upload_id
                    )
                self._upload_id = None
            elif self._published is not None:
                self._store.delete_if_match(self.filename, self._published.etag)
                self._published = None
        except OSError as error:
            # A later pass aborts the upload (or adopts the object): log it.
            logger.warning("could not clean up %s after a failure: %s", key, error)

    def _shutdown(self) -> None:
        while self._pending:
            with suppress(Exception):  # the caller's error wins
                self._parts.append(self._pending.popleft().result())
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class ObjectArtifactStream:
    """A stream into an object store: spooled locally, parts sent as they fill.

    `close()` completes the object create-only and seals the artifact;
    `fail()` (or an exception in a `with` block) does the same as `partial`.
    When the object cannot be written the artifact is recorded `lost` (its
    bytes never reached the vault) and the error propagates.
    """

    def __init__(
        self,
        owner: ObjectArtifactStore,
        artifact: Artifact,
        scanner: KeyLineScanner | None,
    ) -> None:
        self._owner = owner
        self._artifact = artifact
        self._upload = _Upload(owner, scanner, filename=artifact.filename)
        # Unnamed, 0600, gone when closed: nothing for another process to find.
        self._spool: Any = tempfile.TemporaryFile(prefix="spillvault-stream-")  # noqa: SIM115
        self._size = 0
        self._sealed = False
        self._mutex = threading.Lock()

    @property
    def artifact(self) -> Artifact:
        """The artifact as last recorded."""
        return self._artifact

    @property
    def filename(self) -> str:
        """The artifact's filename."""
        return self._artifact.filename

    @property
    def handle(self) -> str:
        """The artifact's handle."""
        return self._owner.handle_for(self._artifact.filename)

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._size

    @property
    def closed(self) -> bool:
        """Whether the stream was sealed (or gave up)."""
        return self._sealed

    def spool_blob(self) -> SpoolBlob | None:
        """Return a reader of the bytes so far, or None once sealed."""
        with self._mutex:
            if self._sealed:
                return None
            return SpoolBlob(os.dup(self._spool.fileno()), self._size)

    def write(self, data: bytes) -> None:
        """Append `data` verbatim."""
        if self._sealed:
            msg = f"stream {self.filename} is already sealed"
            raise ValueError(msg)
        data = _as_bytes(data)
        try:
            self._spool.write(data)
            self._spool.flush()
            with self._mutex:
                self._size += len(data)
            self._upload.write(data)
        except OSError:
            self._end(partial=True, quietly=True)
            raise

    def close(self, *, command: CommandFacts | None = None) -> Artifact:
        """Complete the object and seal the artifact; idempotent once sealed."""
        if not self._sealed:
            self._end(partial=False, command=command)
        return self._artifact

    def fail(self, *, command: CommandFacts | None = None) -> Artifact:
        """Seal what was written as `partial`; idempotent once sealed."""
        if not self._sealed:
            self._end(partial=True, command=command)
        return self._artifact

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        else:
            self._end(partial=True, quietly=True)

    def drop_spool(self) -> None:
        """Close the spool: its bytes go with it."""
        self._spool.close()

    def _end(
        self,
        *,
        partial: bool,
        command: CommandFacts | None = None,
        quietly: bool = False,
    ) -> None:
        if self._sealed:
            return
        session = self._owner.session
        try:
            content, first_line = self._upload.hasher.finish()
            _, facts = self._upload.publish()
            seal = self._artifact.seal_partial if partial else self._artifact.seal
            seal(
                content,
                summary=summary_for(content, first_line),
                sealed_at=session.clock.now(),
                command=command,
                stored_object=facts,
            )
            session.store.save_aggregates(self._artifact)
        except BaseException as error:
            self._upload.discard()
            self._give_up(error)
            if not quietly or not isinstance(error, Exception):
                raise
        finally:
            with self._mutex:
                self._sealed = True
            self._owner.stream_ended(self.filename)
            self.drop_spool()

    def _give_up(self, error: BaseException) -> None:
        """Record `lost`: the bytes never reached the vault (the spool goes now)."""
        session = self._owner.session
        try:
            recorded = session.store.get_artifact(self.filename)
            if recorded is not None and recorded.artifact_state is ArtifactState.OPEN:
                recorded.mark_lost(detected_at=session.clock.now())
                session.store.save_aggregates(recorded)
            if recorded is not None:
                self._artifact = recorded
        except Exception as failure:  # noqa: BLE001 - the caller's error wins
            logger.warning(
                "stream %s could not be recorded lost (%s) after: %s",
                self.filename,
                failure,
                error,
            )


__all__ = [
    "PART_SIZE",
    "STALE_UPLOAD_AGE",
    "ListedObject",
    "ObjectArtifactStore",
    "ObjectArtifactStream",
    "ObjectBlob",
    "SpoolBlob",
    "checksum_of_whole",
    "vault_session_ids",
]
