"""A conformance test case for artifact stores, shipped in the package (S2, S3.2).

An artifact store keeps a session's tool outputs: it stores whole outputs and
streams, records each artifact's event with its digests in the session's event
store, issues handles, resolves only its own, and opens artifacts for reading.
`ArtifactStoreTestCase` checks what every backend must do, whatever holds the
bytes: exact round trips, the recorded digests and sizes, never-reused names,
never-overwritten artifacts, refused hostile handles (`ArtifactAccessError`),
streams sealed whole or `partial`, and nothing left behind by a failure.
What only a local filesystem can show (permissions, symlinks, flocks, a full
disk) is the local store's own business, tested beside it.

Subclass it, implement `create_store()`, `stored_names()` and
`delete_content()`, and let unittest or pytest run it:

    class TestLocalArtifactStore(ArtifactStoreTestCase):
        def create_store(self, session: Session) -> LocalArtifactStore:
            return LocalArtifactStore(session)

        def stored_names(self, session: Session) -> list[str]:
            return sorted(os.listdir(os.path.join(session.path, "tool-results")))

        def delete_content(self, session: Session, filename: str) -> None:
            os.unlink(os.path.join(session.path, "tool-results", filename))

`setUp()` opens `self.session` (in a fresh temporary directory, on the
in-memory event store, with a fixed clock: see `open_session()`) and
`self.store` on it. Handles are opaque (S1.5), but the hostile handles tried
are made by editing one this store issued: where its filename appears in it,
the filename is swapped for non-canonical names, `..` and the like. Add your
backend's own hostile forms by extending `hostile_handles()`.
"""

# A unittest.TestCase for backend authors: unittest's assertions work under any
# runner and survive `python -O`, so pytest's assert style does not apply here.
# ruff: noqa: PT009, PT027

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from abc import ABC, abstractmethod
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from unittest import TestCase, mock

from spillvault.adapters.session import open_session
from spillvault.adapters.storage.content_writer import OVERLAP_MIN
from spillvault.domain.artifact import Artifact, ArtifactContent
from spillvault.domain.command import CommandFacts
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactSessionReadOnlyError,
)
from spillvault.domain.handles import MAX_HANDLE_LENGTH
from spillvault.testing.event_stores import FixedClock

if TYPE_CHECKING:
    from collections.abc import Iterator

    from spillvault.adapters.session import Session
    from spillvault.domain.ports import ArtifactStore, ArtifactStream, Clock

MiB = CHUNK_SIZE
#: Outputs whose edges matter: empty, line ends, raw bytes, chunk boundaries.
PAYLOADS: dict[str, bytes] = {
    "empty": b"",
    "no_trailing_newline": b"first\nsecond",
    "trailing_newline": b"first\nsecond\n",
    "non_utf8": b"\xff\xfe\x80 caf\xe9\r\n\x00\xc3(\n\xe2\x80\xa8tail",
    "exactly_1_mib": (b"0123456789abcde\n" * (MiB // 16)),
    "1_mib_plus_1": (b"0123456789abcde\n" * (MiB // 16)) + b"!",
    "newline_on_boundary": b"x" * (MiB - 1) + b"\n" + b"y" * 5,
}
#: How the payloads are cut into the chunks handed to `store()`.
PIECE_SIZES = (7, 65536 + 3, 4 * MiB)
ARTIFACT_EVENT_PREFIX = "spillvault:Artifact."


class RecordingScanner:
    """A key-line scanner that keeps every chunk it is fed, and each count given."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.newlines: list[tuple[int | None, int]] = []

    def feed(self, chunk: bytes, newlines: int | None = None) -> None:
        """Keep the chunk, and the newline count given beside the real one."""
        self.seen.append(chunk)
        self.newlines.append((newlines, chunk.count(b"\n")))


def expected_content(data: bytes) -> dict[str, Any]:
    """Return the facts S2.3 and S2.5 demand of `data`, computed independently."""
    chunks = [data[i : i + MiB] for i in range(0, len(data), MiB)]
    lines = 0 if not data else data.count(b"\n") + (not data.endswith(b"\n"))
    return {
        "content_sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
        "line_count": lines,
        "chunk_sha256": [hashlib.sha256(c).hexdigest() for c in chunks],
        "chunk_newlines": [c.count(b"\n") for c in chunks],
    }


def _as_content(data: bytes) -> dict[str, Any]:
    facts = expected_content(data)
    facts["chunk_sha256"] = tuple(facts["chunk_sha256"])
    facts["chunk_newlines"] = tuple(facts["chunk_newlines"])
    return facts


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    """Yield `data` in pieces of `size` bytes."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


class ArtifactStoreTestCase(TestCase, ABC):
    """What every artifact store must do, whatever holds the bytes (S2, S3.2)."""

    #: The name of the session `setUp()` opens.
    session_name = "session-a"

    workdir: str
    clock: Clock
    session: Session
    store: ArtifactStore

    @abstractmethod
    def create_store(self, session: Session) -> ArtifactStore:
        """Return a new store object on `session`'s artifacts."""

    @abstractmethod
    def stored_names(self, session: Session) -> list[str]:
        """Return the sorted names of all the backend holds for `session`.

        Artifacts and anything else it keeps there (a temporary upload, a
        leftover): the suite checks that a failure leaves nothing behind.
        """

    @abstractmethod
    def delete_content(self, session: Session, filename: str) -> None:
        """Remove an artifact's bytes behind the store's back, as an operator might."""

    def create_clock(self) -> Clock:
        """Return the clock sessions are opened with."""
        return FixedClock(datetime(2026, 1, 1, tzinfo=UTC))

    def session_kwargs(self) -> dict[str, Any]:
        """Return the `open_session` keywords (by default: the in-memory store)."""
        return {"event_store": "memory"}

    def setUp(self) -> None:
        """Make `self.workdir`, then open `self.session` and `self.store` on it."""
        super().setUp()
        self.workdir = tempfile.mkdtemp(prefix="spillvault-artifact-store-")
        self.addCleanup(shutil.rmtree, self.workdir, ignore_errors=True)
        self.clock = self.create_clock()
        self.session, self.store = self.open_store(self.session_name)

    # builders -------------------------------------------------------------

    def open_session(self, name: str, **options: Any) -> Session:
        """Open (or create) session `name` in `self.workdir`; closed after the test."""
        session = open_session(
            os.path.join(self.workdir, name),
            clock=self.clock,
            **{**self.session_kwargs(), **options},
        )
        self.addCleanup(session.close)
        return session

    def open_store(self, name: str, **options: Any) -> tuple[Session, ArtifactStore]:
        """Open session `name` and a store on it; both are closed after the test."""
        session = self.open_session(name, **options)
        store = self.create_store(session)
        self.addCleanup(store.close)
        return session, store

    def read_content(self, store: ArtifactStore, handle: str) -> bytes:
        """Return every byte `store.open_for_read(handle)` gives."""
        blob = store.open_for_read(handle)
        try:
            parts: list[bytes] = []
            offset = 0
            while chunk := blob.read_at(offset, MiB):
                parts.append(chunk)
                offset += len(chunk)
            data = b"".join(parts)
            self.assertEqual(len(data), blob.size)
            return data
        finally:
            blob.close()

    def artifact_events(self, session: Session | None = None) -> list[str]:
        """Return the topics of the session's artifact events, in order."""
        store = (session or self.session).store
        return [
            note.topic
            for note in store.notifications()
            if note.topic.startswith(ARTIFACT_EVENT_PREFIX)
        ]

    def recorded(self, filename: str, session: Session | None = None) -> Artifact:
        """Return the artifact as the session's event store holds it."""
        artifact = (session or self.session).store.get_artifact(filename)
        if artifact is None:
            raise self.failureException(f"no event recorded for {filename}")
        return artifact

    def assert_nothing_stored(self, session: Session | None = None) -> None:
        """Fail unless the session has no stored content and no artifact event."""
        self.assertEqual(self.stored_names(session or self.session), [])
        self.assertEqual(self.artifact_events(session), [])

    def hostile_handles(self, handle: str, filename: str) -> list[str]:
        """Return handles the store must refuse, made from one it issued.

        Extend this (calling it) with your backend's own hostile forms.
        """
        hostile = [
            "",
            "/etc/passwd",
            handle + "\x00",
            handle + "/",
            handle + " ",
            handle + ".bak",
            # bare names are no handle
            "tool_result_1.txt",
            ".tmp-x",
            "session.json",
            "..",
            "x\x00",
        ]
        if filename in handle:
            hostile += [
                handle.replace(filename, other)
                for other in (
                    filename.replace("tool_result", "tool_result\x00"),
                    "tool_result_1.txt",
                    "tool_result_0001.txt",
                    "tool_result_000.txt",
                    filename.upper(),
                    f"{filename}.bak",
                    f"{filename} ",
                    f"../{filename}",
                    f"./{filename}",
                    ".tmp-abc",
                    "session.json",
                )
            ]
        return hostile

    # storing a whole output -------------------------------------------------

    def test_bytes_round_trip_exactly(self) -> None:
        """Any bytes, in any pieces, read back exactly, with their digests recorded."""
        for name, data in sorted(PAYLOADS.items()):
            for piece_size in PIECE_SIZES:
                size = 4093 if piece_size == 7 and len(data) > 4096 else piece_size
                with self.subTest(payload=name, piece_size=size):
                    session, store = self.open_store(f"round-trip-{name}-{size}")
                    artifact = store.store(
                        pieces(data, size), source_tool="bash", tool_use_id="tu-1"
                    )
                    self.assertEqual(artifact.filename, "tool_result_001.txt")
                    self.assertEqual(artifact.state, "sealed")
                    self.assertEqual(artifact.content, expected_content(data))
                    self.assertEqual(artifact.tool_use_id, "tu-1")
                    self.assertEqual(artifact.source_tool, "bash")
                    handle = store.handle_for(artifact.filename)
                    self.assertEqual(self.read_content(store, handle), data)
                    # nothing but the artifact: no temporary copy left
                    self.assertEqual(self.stored_names(session), [artifact.filename])
                    recorded = self.recorded(artifact.filename, session)
                    self.assertEqual(recorded.content, expected_content(data))

    def test_the_event_records_flags_source_id_and_a_bounded_summary(self) -> None:
        """The stored event has the error flag, the source id and a short summary."""
        data = b"\n   \n\x00\t\n" + b"Traceback: " + b"z" * 5000 + b"\nmore\n"
        before = self.clock.now()
        artifact = self.store.store([data], source_tool="pytest", is_error=True)
        after = self.clock.now()
        self.assertTrue(artifact.is_error is True, artifact.is_error)
        summary = artifact.summary or ""
        self.assertTrue(summary.startswith("Traceback: zzz"), summary)
        self.assertLessEqual(len(summary), 240)
        self.assertTrue(summary.endswith(f"(5 lines, {len(data)} bytes)"), summary)
        digest = hashlib.sha256(data).hexdigest()
        self.assertEqual(
            artifact.source_id(self.session.session_id),
            f"artifact:{self.session.session_id}:tool_result_001.txt:{digest[:12]}",
        )
        created = datetime.fromisoformat(artifact.created_at)
        self.assertTrue(before <= created <= after, artifact.created_at)
        self.assertEqual(self.recorded(artifact.filename).summary, summary)

    def test_the_first_line_after_a_huge_blank_prefix_still_summarises(self) -> None:
        """Leading blank megabytes do not hide the first real line."""
        data = b" " * (3 * MiB) + b"real start\n"
        artifact = self.store.store(pieces(data, 1000), source_tool="bash")
        self.assertTrue((artifact.summary or "").startswith("real start (1 lines"))

    def test_a_caller_summary_is_used_and_validated_before_anything(self) -> None:
        """A bad summary is refused before a chunk is read or anything is stored."""
        consumed: list[bytes] = []

        def chunks() -> Iterator[bytes]:
            consumed.append(b"x")
            yield b"x"

        for bad in ("", "   ", "s" * 241):
            with self.assertRaisesRegex(ValueError, "summary"):
                self.store.store(chunks(), source_tool="bash", summary=bad)
        self.assertEqual(consumed, [])
        self.assert_nothing_stored()
        artifact = self.store.store([b"data"], source_tool="bash", summary="my summary")
        self.assertEqual(artifact.summary, "my summary")

    def test_the_key_line_scanner_sees_every_chunk_in_order(self) -> None:
        """The scanner is fed the stored bytes, chunk by chunk, with true counts."""
        data = b"line\n" * 200_000
        for size in (333, OVERLAP_MIN + 1):
            with self.subTest(piece_size=size):
                scanner = RecordingScanner()
                artifact = self.store.store(
                    pieces(data, size), source_tool="bash", key_line_scanner=scanner
                )
                self.assertEqual(artifact.content, expected_content(data))
                self.assertEqual(b"".join(scanner.seen), data)
                self.assertEqual(len(scanner.seen), -(-len(data) // size))
                for given, real in scanner.newlines:
                    self.assertIn(given, (None, real))

    def test_chunks_that_are_not_bytes_are_refused_and_leave_nothing(self) -> None:
        """A str among the chunks is a TypeError, and nothing is stored."""
        chunks: list[Any] = [b"ok", "text"]
        with self.assertRaisesRegex(TypeError, "bytes"):
            self.store.store(chunks, source_tool="bash")
        self.assert_nothing_stored()

    def test_stored_artifacts_are_never_overwritten(self) -> None:
        """Each output gets a name of its own; earlier ones read back unchanged."""
        first = self.store.store([b"first\n"], source_tool="t")
        second = self.store.store([b"second\n"], source_tool="t")
        self.assertNotEqual(first.filename, second.filename)
        handles = [self.store.handle_for(a.filename) for a in (first, second)]
        self.assertNotEqual(handles[0], handles[1])
        self.assertEqual(self.read_content(self.store, handles[0]), b"first\n")
        self.assertEqual(self.read_content(self.store, handles[1]), b"second\n")
        self.assertEqual(self.artifact_events(), [f"{ARTIFACT_EVENT_PREFIX}Stored"] * 2)
        self.assertEqual(
            self.recorded(first.filename).content, expected_content(b"first\n")
        )

    def test_confirm_accepts_the_stored_content_and_nothing_else(self) -> None:
        """`confirm` passes for what was stored; gone bytes or other facts raise."""
        data = b"kept\n" * 1000
        artifact = self.store.store([data], source_tool="t")
        content = self.recorded(artifact.filename).stored_content
        if content is None:
            raise self.failureException("a stored artifact has no content")
        self.store.confirm(artifact.filename, content)
        other = b"kept\n" * 999 + b"kEpt\n"
        with self.assertRaises(ArtifactIntegrityError):
            self.store.confirm(artifact.filename, ArtifactContent(**_as_content(other)))
        self.delete_content(self.session, artifact.filename)
        with self.assertRaises(FileNotFoundError):
            self.store.confirm(artifact.filename, content)

    # references and hints ---------------------------------------------------

    def test_reference_for_a_stored_artifact(self) -> None:
        """The reference carries the handle, digest, size and provenance (S4.1)."""
        artifact = self.store.store([b"hello\n"], source_tool="grep")
        reference = self.store.reference_for(artifact)
        digest = hashlib.sha256(b"hello\n").hexdigest()
        self.assertEqual(reference.handle, self.store.handle_for(artifact.filename))
        self.assertEqual(reference.for_memory().artifact_path, reference.handle)
        self.assertEqual(reference.content_sha256, digest)
        self.assertEqual(reference.size_bytes, 6)
        self.assertEqual(reference.source_tool, "grep")
        self.assertEqual(reference.summary, artifact.summary)
        self.assertTrue(reference.source.source_id.endswith(digest[:12]))
        self.assertEqual(reference.source.captured_at, artifact.created_at)
        self.assertIn("grep", reference.source.title)
        with (
            self.store.open_stream("bash") as stream,
            self.assertRaisesRegex(ValueError, "open"),
        ):
            self.store.reference_for(stream.artifact)

    def test_the_hint_names_the_handle_and_how_to_page(self) -> None:
        """The hint names the handle; `longest_handle` bounds every handle."""
        handle = self.store.handle_for(
            self.store.store([b"x"], source_tool="bash").filename
        )
        hint = self.store.hint(handle)
        self.assertIn(handle, hint)
        self.assertLessEqual(len(handle), MAX_HANDLE_LENGTH)
        longest = self.store.longest_handle()
        self.assertGreaterEqual(len(longest), len(handle))
        self.assertGreaterEqual(len(self.store.hint(longest)), len(hint))
        with self.assertRaises(ArtifactAccessError):
            self.store.hint("/etc/passwd")

    # numbering (S2.2) -------------------------------------------------------

    def test_numbers_are_never_reused_after_content_is_deleted(self) -> None:
        """A deleted artifact's name is never issued again."""
        names = [self.store.store([b"a"], source_tool="t").filename for _ in range(3)]
        self.assertEqual(names, [f"tool_result_00{n}.txt" for n in (1, 2, 3)])
        for name in names:
            self.delete_content(self.session, name)
        again = self.store.store([b"b"], source_tool="t")
        self.assertEqual(again.filename, "tool_result_004.txt")

    def test_two_stores_on_one_session_never_share_a_number(self) -> None:
        """Concurrent writers on one session, storing and streaming, get 12 names."""
        stores = [self.store, self.create_store(self.session)]
        self.addCleanup(stores[1].close)
        names: list[str] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(store: ArtifactStore) -> None:
            try:
                for _ in range(5):
                    name = store.store([b"x"], source_tool="t").filename
                    with lock:
                        names.append(name)
                with store.open_stream("t") as stream:
                    stream.write(b"y")
                with lock:
                    names.append(stream.filename)
            except BaseException as error:  # noqa: BLE001 - reported to the test
                errors.append(error)

        threads = [threading.Thread(target=work, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(names), 12)
        self.assertEqual(len(set(names)), 12)

    # handles (S1.5, S3.2) ---------------------------------------------------

    def test_own_handles_resolve_to_their_filename(self) -> None:
        """A handle resolves and reads, from this store object and another."""
        name = self.store.store([b"x"], source_tool="t").filename
        handle = self.store.handle_for(name)
        self.assertEqual(self.store.resolve(handle), name)
        self.assertEqual(self.read_content(self.store, handle), b"x")
        other = self.create_store(self.session)
        self.addCleanup(other.close)
        self.assertEqual(other.handle_for(name), handle)
        self.assertEqual(other.resolve(handle), name)
        self.assertEqual(self.read_content(other, handle), b"x")

    def test_hostile_handles_are_refused(self) -> None:
        """Edited handles, other sessions' handles and non-strings are refused."""
        name = self.store.store([b"secret"], source_tool="t").filename
        handle = self.store.handle_for(name)
        _, other_store = self.open_store(f"{self.session_name}-other")
        other_handle = other_store.handle_for(
            other_store.store([b"b"], source_tool="t").filename
        )
        for bad in [*self.hostile_handles(handle, name), other_handle]:
            with self.subTest(handle=bad):
                self.assertNotEqual(bad, handle)
                with self.assertRaises(ArtifactAccessError):
                    self.store.resolve(bad)
                with self.assertRaises(ArtifactAccessError):
                    self.store.open_for_read(bad)
                with self.assertRaises(ArtifactAccessError):
                    self.store.hint(bad)
        not_strings: list[Any] = [name.encode(), None, 1]
        for bad in not_strings:
            with self.subTest(handle=bad):
                with self.assertRaises(ArtifactAccessError):
                    self.store.resolve(bad)
                with self.assertRaises(ArtifactAccessError):
                    self.store.open_for_read(bad)
                with self.assertRaises(ArtifactAccessError):
                    self.store.hint(bad)

    # failures leave nothing (S1.2 rule 5) -----------------------------------

    def test_an_event_store_failure_leaves_nothing(self) -> None:
        """When the artifact's event cannot be recorded, its bytes go too."""
        real = self.session.store.save_aggregates

        def failing(*aggregates: Any) -> None:
            if any(isinstance(a, Artifact) for a in aggregates):
                msg = "event store failure: disk I/O error"
                raise ArtifactLeaseJournalError(msg)
            real(*aggregates)

        with mock.patch.object(self.session.store, "save_aggregates", failing):
            with self.assertRaises(ArtifactLeaseJournalError):
                self.store.store([b"data"], source_tool="t")
            with self.assertRaises(ArtifactLeaseJournalError):
                self.store.open_stream("t")
        self.assert_nothing_stored()

    def test_a_failing_producer_leaves_nothing(self) -> None:
        """An exception from the chunks propagates, and nothing is stored."""

        def producer() -> Iterator[bytes]:
            yield b"a" * MiB
            msg = "tool crashed"
            raise RuntimeError(msg)

        with self.assertRaisesRegex(RuntimeError, "tool crashed"):
            self.store.store(producer(), source_tool="t")
        self.assert_nothing_stored()

    def test_a_closed_store_stores_nothing(self) -> None:
        """After `close()` (idempotent), storing and streaming raise ValueError."""
        self.store.close()
        self.store.close()
        with self.assertRaises(ValueError):
            self.store.store([b"late"], source_tool="t")
        with self.assertRaises(ValueError):
            self.store.open_stream("t")
        self.assert_nothing_stored()

    def test_a_read_only_session_reads_and_stores_nothing(self) -> None:
        """On a session opened `mode="read"` artifacts read; writes are refused."""
        artifact = self.store.store([b"kept\n"], source_tool="t")
        handle = self.store.handle_for(artifact.filename)
        view, viewer = self.open_store(self.session_name, mode="read")
        self.assertEqual(self.read_content(viewer, handle), b"kept\n")
        with self.assertRaises(ArtifactSessionReadOnlyError):
            viewer.store([b"more"], source_tool="t")
        with self.assertRaises(ArtifactSessionReadOnlyError):
            viewer.open_stream("t")
        self.assertEqual(self.stored_names(view), [artifact.filename])
        self.assertEqual(self.artifact_events(view), [f"{ARTIFACT_EVENT_PREFIX}Stored"])

    # streaming (S2.4) -------------------------------------------------------

    def test_a_stream_is_readable_while_open_and_sealed_on_close(self) -> None:
        """A stream is recorded open, readable as it grows, and sealed by close."""
        stream = self.store.open_stream("bash", tool_use_id="tu-9")
        self.assertEqual(stream.filename, "tool_result_001.txt")
        self.assertEqual(self.recorded(stream.filename).state, "open")
        self.assertEqual(stream.handle, self.store.handle_for(stream.filename))
        written = b""
        for part in (b"building...\n", b"\xff\xfe raw\n", b"x" * (MiB + 5), b"done"):
            stream.write(part)
            written += part
            self.assertEqual(self.read_content(self.store, stream.handle), written)
            self.assertEqual(stream.size, len(written))
        self.assertFalse(stream.closed)
        artifact = stream.close()
        self.assertTrue(stream.closed)
        self.assertEqual(artifact.state, "sealed")
        self.assertEqual(artifact.content, expected_content(written))
        self.assertTrue((artifact.summary or "").startswith("building... (3 lines"))
        self.assertEqual(artifact.tool_use_id, "tu-9")
        self.assertIs(stream.close(), artifact)  # idempotent
        with self.assertRaisesRegex(ValueError, "sealed"):
            stream.write(b"more")
        recorded = self.recorded(stream.filename)
        self.assertEqual(recorded.state, "sealed")
        self.assertEqual(recorded.content, expected_content(written))
        self.assertEqual(self.read_content(self.store, stream.handle), written)

    def test_fail_and_an_exception_in_the_block_seal_partial(self) -> None:
        """`fail()` or an exception in the `with` block seals what was written."""
        stream = self.store.open_stream("t")
        stream.write(b"half")
        self.assertEqual(stream.fail().state, "partial")
        self.assertEqual(stream.artifact.content, expected_content(b"half"))
        self.assertEqual(self.recorded(stream.filename).state, "partial")
        streams: list[ArtifactStream] = []

        def block_that_raises() -> None:
            with self.store.open_stream("t") as second:
                streams.append(second)
                second.write(b"some\nbytes")
                raise KeyError("boom")

        with self.assertRaises(KeyError):
            block_that_raises()
        [second] = streams
        self.assertEqual(second.artifact.state, "partial")
        self.assertEqual(second.artifact.content, expected_content(b"some\nbytes"))
        self.assertEqual(self.recorded(second.filename).state, "partial")

    # what the producing command did (issue 15) ------------------------------

    def test_a_command_given_to_store_close_or_fail_is_recorded(self) -> None:
        """What a command did, given with its output, is there after reopening."""
        ran = CommandFacts(("pytest", "-x", "tests"), exit_status=1, duration_ms=1234)
        killed = CommandFacts(("sleep", "9"), 143, 5, signal="SIGTERM")
        stored = self.store.store([b"out\n"], source_tool="bash", command=ran)
        self.assertEqual(stored.command_facts, ran)
        closing = self.store.open_stream("bash")
        closing.write(b"long\n")
        self.assertIsNone(closing.artifact.command_facts)
        self.assertEqual(closing.close(command=ran).command_facts, ran)
        failing = self.store.open_stream("bash")
        failing.write(b"cut")
        self.assertEqual(failing.fail(command=killed).command_facts, killed)
        plain = self.store.store([b"no command"], source_tool="bash")
        view, _ = self.open_store(self.session_name, mode="read")
        for filename, facts in [
            (stored.filename, ran),
            (closing.filename, ran),
            (failing.filename, killed),
            (plain.filename, None),
        ]:
            with self.subTest(filename=filename):
                self.assertEqual(self.recorded(filename, view).command_facts, facts)
