"""A crash-testing world for a vault session: objects in S3, events in PostgreSQL.

`VaultCrashWorld` is `CrashWorld`'s counterpart for the object-store backend
(issue 18). It runs the real code (a vault session, the spill gate, the
retention journal's table, reconciliation, GC of objects) against a real S3
server and a real PostgreSQL server, with a `FakeClock` and a `WatchedOwner`.
Each example opens a fresh session of one vault.

The crash points are the steps of the object store and the event store: a
`CallSeam` wraps the shared boto3 client's methods and
`SessionStore.save_aggregates`, numbers an operation's S3 calls and event saves
(all together, or those of one kind: its second `delete_object`, its first
`save Artifact.Quarantined`), and at the chosen one (a `Hazard`) either

- crashes (`VaultCrash`, a `BaseException`: a dead process runs nothing more),
  before the call is sent or after it was done (an object uploaded but its
  event never recorded; an intent recorded but the delete never sent; a delete
  done but `deleted` never recorded); or
- fails an S3 call as the network would (`ObjectStoreError` through the code's
  own translation of botocore's errors): before it (nothing sent) or after it
  (done on the server, the answer lost), once or from there on.

A crash drops the session without a clean close: its connections are closed,
its advisory lock's too (the server drops the lock with it, as with a dead
process). Recovery then runs on reopening, maybe crashing itself first at one
of its own calls, and is checked (I5): each intent the crash left is settled
as its object says (present: restored; gone: deleted), stale uploads are
aborted, the journal table catches up with the lease events, and a second
recovery changes nothing (one with nothing to do changes nothing at all). A
fault fails the operation with a typed error (the gate keeps the output
inline instead) and the session is closed and reopened likewise.

`check()` asserts CrashWorld's invariants after every operation and every
recovery, read for objects (see `support.crash_world` for I1-I5):

- I1 no artifact a live lease protects is absent from the bucket, out of a
  stored state, or other than its record (`confirm`: size, ETag, SHA-256
  checksum); an acknowledged spill stays so unless a GC apply that planned its
  deletion has started.
- I2 every acknowledged journal byte (the journal table's) is still there.
- I3 no ABORTED or RELEASED transaction is live in the owner.
- I4 owner generations and the journal sequence never decrease.
- I5 recovery is idempotent (above).
- O1 every object under the session's prefix has an artifact event, except
  one whose event a crash or fault prevented; a GC plan adopts that one as an
  orphan once it is older than `ORPHAN_GRACE` (0 in this world).
- O2 nothing is deleted without its intent: a delete reaches the server only
  for an artifact recorded `quarantined` (or for an object its own writer put
  in this operation and never recorded); every `Deleted` event follows a
  `Quarantined` one; no artifact is `lost`, a stored one has its object and a
  deleted one has none (this world never touches the bucket behind the code).
- O3 after a recovery, no upload older than `STALE_UPLOAD_AGE` is left.

GC ages objects by the server's Last-Modified (real time): the clock starts at
the real time and only moves forward, so GC's `now` is never before it.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import random
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from uuid import UUID

import pytest
from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    EndpointConnectionError,
)

from spillvault.adapters.services import object_gc
from spillvault.adapters.services.object_gc import vault_store
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.advisory_lock import advisory_lock_for
from spillvault.adapters.storage.eventstore import SessionStore
from spillvault.adapters.storage.journal_table import JournalTable
from spillvault.adapters.storage.object_store import PART_SIZE, STALE_UPLOAD_AGE
from spillvault.adapters.storage.postgres_store import PostgresBackend, schema_for
from spillvault.adapters.storage.s3_client import ObjectLocation, s3_client
from spillvault.domain.enums import (
    ArtifactCleanupStatus,
    ArtifactLeasePhase,
    ArtifactState,
)
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactPublicationRejected,
    ObjectStoreError,
)
from spillvault.domain.machines import ARTIFACT_MACHINE
from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

from support.crash_world import (
    DOMAIN_ERRORS,
    ORPHAN_TTL,
    PROTECTING,
    Counters,
    InvariantViolation,
    Oracle,
    Outcome,
    WatchedOwner,
    _last_sequence,
)
from support.fakes import FakeClock

if TYPE_CHECKING:
    from collections.abc import Callable

    from spillvault.adapters.session import Session
    from spillvault.domain.artifact import Artifact
    from spillvault.domain.cleanup import ArtifactCleanupPlan, ArtifactCleanupReport
    from spillvault.domain.values import ArtifactReference

T = TypeVar("T")
MULTIPART = PART_SIZE + (1 << 20)
"""A spill of this many bytes goes up as a multipart upload of two parts."""
ARTIFACT_TOPIC = "spillvault:Artifact."
LEASE_TOPIC = "spillvault:Lease."
STORED = frozenset(ArtifactState(s) for s in ARTIFACT_MACHINE.tagged("stored"))
# What an injected network fault may surface as: our typed errors only (a raw
# botocore error escaping the store would be a bug).
VAULT_FAULT_ERRORS: tuple[type[Exception], ...] = (ObjectStoreError, *DOMAIN_ERRORS)
S3_CALLS = (
    "put_object",
    "create_multipart_upload",
    "upload_part",
    "complete_multipart_upload",
    "abort_multipart_upload",
    "delete_object",
    "head_object",
    "get_object",
    "list_objects_v2",
    "list_multipart_uploads",
)
WRITES = frozenset({"put_object", "complete_multipart_upload"})
_sessions = itertools.count(1)


class VaultCrash(BaseException):
    """The simulated death of the process holding the session."""


@dataclass(frozen=True)
class Hazard:
    """A crash or a network fault at one call of an operation.

    It strikes the operation's call number `at` among those it aims at: the
    calls whose label starts with `on` (`"delete_object"`, `"save
    Artifact.Quarantined"`), or with `on=None` every call (S3 calls and event
    saves, numbered together from 1). A fault aims at S3 calls only, and if
    `persistent` strikes every later one too (a server gone). `after`: the
    call is done, then it strikes (a crash after it, or the answer lost on its
    way back); else it strikes before anything is sent.
    """

    kind: Literal["crash", "fault"]
    at: int
    after: bool = False
    persistent: bool = False
    on: str | None = None

    def aims_at(self, label: str, *, s3: bool) -> bool:
        """Say whether a call so labelled is one this hazard counts."""
        if self.kind == "fault" and not s3:
            return False
        return self.on is None or label.startswith(self.on)

    def describe(self) -> str:
        """Say where and how it strikes, for the replay line."""
        when = "after" if self.after else "before"
        target = "call" if self.on is None else self.on
        lasting = " (persistent)" if self.persistent else ""
        return f"{self.kind} {when} {target} #{self.at}{lasting}"


class CallSeam:
    """Numbers an operation's S3 calls and event saves; strikes at one of them.

    Installed on the process's shared S3 client (instance attributes) and on
    `SessionStore.save_aggregates` (every store saves through it, recovery's
    too). Disarmed, every call passes straight through uncounted: the oracle's
    own reads go the same way.
    """

    def __init__(self, client: Any, on_delete: Callable[[str, set[str]], None]) -> None:
        self.client = client
        self.on_delete = on_delete
        self.hazard: Hazard | None = None
        self.armed = False
        self.dead = False
        self.count = 0  # the operation's calls so far
        self.aimed = 0  # the operation's calls so far that the hazard aims at
        self.log: list[str] = []
        self.struck: str | None = None
        self.written: set[str] = set()  # objects put or completed this operation
        self.uploads_started = False  # a multipart upload was ever started
        self._mutex = threading.Lock()  # a multipart part goes up on a helper thread

    def install(self, patch: pytest.MonkeyPatch) -> None:
        """Wrap the client's S3 calls and every store's event saves."""
        for method in S3_CALLS:
            patch.setattr(
                self.client, method, self._s3(method, getattr(self.client, method))
            )
        real_save = SessionStore.save_aggregates

        def save_aggregates(store: SessionStore, *aggregates: Any) -> None:
            events = [
                type(e).__qualname__ for a in aggregates for e in a.pending_events
            ]
            self._step(
                f"save {', '.join(events)}",
                lambda: real_save(store, *aggregates),
                s3=False,
            )

        patch.setattr(SessionStore, "save_aggregates", save_aggregates)

    def arm(self, hazard: Hazard | None) -> None:
        """Start counting an operation's calls, with a hazard or none."""
        with self._mutex:
            self.hazard = hazard
            self.count = 0
            self.aimed = 0
            self.log = []
            self.struck = None
            self.written = set()
            self.armed = True

    def disarm(self) -> None:
        """Let every call through uncounted (the oracle's reads, clean reopens)."""
        with self._mutex:
            self.armed = False
            self.hazard = None

    def revive(self) -> None:
        """A new process: the dead one's crash no longer holds."""
        self.dead = False

    @property
    def fault_fired(self) -> bool:
        """Whether a network fault struck the operation."""
        return self.struck is not None and self.struck.startswith("fault")

    def _s3(self, method: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(**kwargs: Any) -> Any:
            name = str(kwargs.get("Key", "")).rpartition("/")[2]

            def send() -> Any:
                if method == "delete_object":
                    self.on_delete(name, self.written)
                self.uploads_started |= method == "create_multipart_upload"
                answer = real(**kwargs)
                if method in WRITES and self.armed:
                    self.written.add(name)
                return answer

            return self._step(f"{method} {name}".rstrip(), send, s3=True)

        return call

    def _step(self, label: str, send: Callable[[], T], *, s3: bool) -> T:
        with self._mutex:
            if not self.armed:
                strike = False
            elif self.dead:
                raise VaultCrash(f"{label}: the process is dead")
            else:
                self.count += 1
                self.log.append(f"{self.count} {label}")
                strike = self._strikes(label, s3=s3)
                if strike:
                    assert self.hazard is not None
                    self.struck = f"{self.hazard.describe()}: {self.count} {label}"
        hazard = self.hazard
        if strike and hazard is not None and not hazard.after:
            self._strike(hazard, label, before=True)
        answer = send()
        if strike and hazard is not None and hazard.after:
            self._strike(hazard, label, before=False)
        return answer

    def _strikes(self, label: str, *, s3: bool) -> bool:
        hazard = self.hazard
        if hazard is None or not hazard.aims_at(label, s3=s3):
            return False
        self.aimed += 1
        if hazard.persistent:
            return self.aimed >= hazard.at
        return self.aimed == hazard.at

    def _strike(self, hazard: Hazard, label: str, *, before: bool) -> None:
        endpoint = str(getattr(self.client.meta, "endpoint_url", "s3"))
        if hazard.kind == "crash":
            self.dead = True
            raise VaultCrash(f"crash {'before' if before else 'after'} {label}")
        if before:
            raise EndpointConnectionError(endpoint_url=endpoint)
        raise ConnectionClosedError(endpoint_url=endpoint)


@dataclass
class VaultCounters(Counters):
    """What the run exercised, beyond `Counters`."""

    recoveries: int = 0
    intents_restored: int = 0
    intents_finished: int = 0
    adopted: int = 0
    uploads_aborted: int = 0
    multipart: int = 0
    hazards_missed: int = 0


@dataclass
class Image:
    """What a crash left for recovery: intents, stale uploads, a journal behind."""

    intents: dict[str, tuple[ArtifactState, bool]] = field(default_factory=dict)
    stale_uploads: int = 0
    journal_behind: bool = False  # lease events the journal does not have yet

    @property
    def work(self) -> bool:
        """Whether recovery has anything to do."""
        return bool(self.intents or self.stale_uploads or self.journal_behind)

    @property
    def calls(self) -> int:
        """At most how many calls recovery makes (a HEAD and a save per intent)."""
        return 2 * len(self.intents) + self.stale_uploads + 1


@dataclass(frozen=True)
class Listed:
    """One object under the session's prefix."""

    name: str
    size: int
    etag: str
    last_modified: datetime


class VaultCrashWorld:
    """One vault session under test, its owner and clock, and the oracle."""

    def __init__(
        self,
        location: str,
        dsn: str,
        *,
        seed: int,
        owner: WatchedOwner | None = None,
    ) -> None:
        self.location = ObjectLocation.parse(location)
        self.dsn = dsn
        self.seed = seed
        self.rng = random.Random(seed)  # noqa: S311 - simulation, not secrets
        # Unique even when Hypothesis replays a seed: a vault session persists.
        self.session_id = f"fuzz-{next(_sessions)}-{seed:08x}"
        self.prefix = self.location.session_prefix(self.session_id)
        # Objects age by the server's clock: start at real time, only go forward.
        self.clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
        self.owner = owner or WatchedOwner(lock_timeout=5)
        self.oracle = Oracle()
        self.counters = VaultCounters()
        self.history: list[str] = []
        self.publishers: dict[str, Callable[[], None]] = {}
        self.transactions: list[str] = []
        self.stored: dict[str, ArtifactReference] = {}  # acknowledged spills
        self.unrecorded: set[str] = set()  # objects a crash or fault left eventless
        self.violations: list[str] = []
        self.histories: dict[str, list[str]] = {}  # artifact -> its event kinds
        self.artifacts: dict[str, Artifact] = {}  # every artifact, as last recorded
        self.unchecked = True  # something happened since the last check
        self.struck: str | None = None  # the last operation's hazard, if it struck
        self.lease_events = 0  # lease events recorded: the journal's records to be
        self._names: dict[UUID, str] = {}
        self._position = 0
        self._numbers = 0
        self.client = s3_client()
        self._patch = pytest.MonkeyPatch()
        self._patch.setattr(object_gc, "ORPHAN_GRACE", timedelta(0))
        self.seam = CallSeam(self.client, self._on_delete)
        self.seam.install(self._patch)
        self.reader: SessionStore | None = None
        self.journal_table: JournalTable | None = None
        try:
            self.session = self._open()
            self.store_id = self.session.store_id
            store_id = UUID(self.store_id)
            # The oracle reads events and the journal through its own connections.
            self.reader = PostgresBackend(dsn, store_id).open()
            self.journal_table = JournalTable(dsn, schema_for(store_id))
            self.check()
            self.acknowledge()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------- lifecycle

    def _open(self) -> Session:
        return open_session(
            self.session_id,
            artifacts=self.location,
            event_store=self.dsn,
            clock=self.clock,
        )

    def close(self) -> None:
        """Close the session cleanly, every connection, undo the patches.

        Also after a violation: Hypothesis keeps a failing example's traceback,
        which would pin a session, and its connections, for the whole run.
        """
        try:
            self.seam.disarm()
            if hasattr(self, "session"):
                session = self.session
                del self.session
                session.close()
        finally:
            if hasattr(self, "store_id"):
                self._release_lock()
            if self.reader is not None:
                self.reader.close()
            if self.journal_table is not None:
                self.journal_table.close()
            self._patch.undo()

    def _release_lock(self) -> None:
        """Close the lock's connection: the server drops the lock with it."""
        lock = advisory_lock_for(self.dsn, self.store_id)
        if lock.held:
            self.violations.append("the session lock is still held by a dead life")
            return
        lock.close()

    def _drop(self) -> None:
        """Let the session go as a dead process does: no clean close."""
        self.unchecked = True
        session = self.session
        del self.session
        if not session.closed:
            with contextlib.suppress(VaultCrash):
                session._close_resources()  # a dead process saves nothing
        del session
        self.seam.disarm()
        self.seam.revive()
        self._release_lock()

    def reopen(self) -> None:
        """Close cleanly and reopen, no crash (after a fault)."""
        self.seam.disarm()
        with contextlib.suppress(*VAULT_FAULT_ERRORS):
            self.session.close()
        self._drop()
        self._recover(interrupt=False)

    def crash_and_reopen(
        self, *, interrupt_recovery: bool = True, downtime: float = 0.0
    ) -> None:
        """Crash now (if not already), restart `downtime` s later, check I5."""
        self.counters.crashes += 1
        if not self.seam.dead:
            self.history.append(f"  crash now, restart {downtime} s later")
        self._drop()
        self.clock.advance(downtime)
        self._recover(interrupt=interrupt_recovery)

    def _recover(self, *, interrupt: bool) -> None:
        """Recover (maybe crashing inside it first), check I5, open the next life."""
        image = self._image()
        if not image.work:
            # Nothing to settle, abort or catch up: recovery must change nothing.
            before = self.describe()
            self.session = self._recovered()
            self._compare(before, "a recovery with nothing to do")
        else:
            if interrupt:
                self._interrupted_recovery(image)
            first = self._recovered()
            try:
                self._check_settled(image)
                expected = self.describe()
            finally:
                first.close()
            self.session = self._recovered()
            self._compare(expected, "a second recovery")
        self.counters.recoveries += 1
        self.check()
        self.acknowledge()

    def _compare(self, expected: dict[str, Any], what: str) -> None:
        """I5: the session just opened is as `expected`; its recovery did nothing."""
        found = self.describe()
        if found != expected:
            difference = _difference(expected, found)
            raise self.violation(f"I5: {what} changed the state:\n{difference}")
        report = self.session.recovery
        if report is not None and report.changed:
            raise self.violation(f"I5: {what} changed {report.to_dict()}")

    def _recovered(self) -> Session:
        """Open the session (recovery runs); a failure to is a violation."""
        try:
            return self._open()
        except Exception as error:
            raise self.violation(f"I5: reopening failed: {error!r}") from error

    def _interrupted_recovery(self, image: Image) -> None:
        """Open with a crash at one of recovery's calls; let go what it left."""
        at = self.rng.randint(1, image.calls)
        hazard = Hazard("crash", at, after=self.rng.random() < 0.5)
        self.seam.arm(hazard)
        crashed = False
        try:
            session = self._open()
        except VaultCrash:
            crashed = True  # open_session closed what it had opened on the way out
        finally:
            self.seam.disarm()
        self.history.append(f"  recovery interrupted: {self.seam.struck or 'missed'}")
        if crashed:
            self.counters.crashes_in_recovery += 1
            self.seam.revive()
            self._release_lock()
        else:
            session.close()  # recovery made fewer calls: it just finished

    def _image(self) -> Image:
        """Read what recovery will find: intents (and their objects), old uploads."""
        self._sync_events()
        present = {found.name for found in self._list()}
        image = Image()
        for name, artifact in sorted(self.artifacts.items()):
            if artifact.artifact_state is ArtifactState.QUARANTINED:
                prior = ArtifactState(artifact.prior_state)
                image.intents[name] = (prior, name in present)
        image.stale_uploads = len(self._stale_uploads())
        image.journal_behind = self.lease_events > _last_sequence(self._journal_bytes())
        return image

    def _check_settled(self, image: Image) -> None:
        """I5: each intent is settled as its object says; no old upload is left."""
        self._sync_events()
        for name, (prior, present) in image.intents.items():
            state = self.artifacts[name].artifact_state
            expected = prior if present else ArtifactState.DELETED
            if state is not expected:
                where = "present" if present else "gone"
                msg = (
                    f"I5: the intent on {name} (object {where}) was settled as "
                    f"{state}, not {expected}"
                )
                raise self.violation(msg)
            if present:
                self.counters.intents_restored += 1
            else:
                self.counters.intents_finished += 1
        left = self._stale_uploads()
        if left:
            raise self.violation(f"O3: recovery left stale uploads {sorted(left)}")
        self.counters.uploads_aborted += image.stale_uploads
        records = _last_sequence(self._journal_bytes())
        if records != self.lease_events:
            msg = (
                f"I5: the journal has {records} records for {self.lease_events} events"
            )
            raise self.violation(msg)

    # ------------------------------------------------------------- operations

    def attempt(
        self,
        name: str,
        action: Callable[[], T],
        *,
        hazard: Hazard | None = None,
        expected: tuple[type[Exception], ...] = (),
    ) -> Outcome:
        """Run one operation with an optional hazard, then recover and check."""
        self.counters.operations += 1
        self.unchecked = True
        if hazard is not None:
            self.counters.faults += hazard.kind == "fault"
            name = f"{name}, {hazard.describe()}"
        self.history.append(name)
        self.seam.arm(hazard)
        # Recover outside the handlers: a live traceback pins the old session.
        value: Any = None
        crashed = False
        failure: Exception | None = None
        try:
            value = action()
        except VaultCrash:
            crashed = True
        except Exception as error:  # sorted out below
            failure = error
        finally:
            self.seam.disarm()
        seam = self.seam
        self.struck = seam.struck
        self.history.append(f"  calls: {'; '.join(seam.log) or 'none'}")
        if hazard is not None and seam.struck is None:
            self.counters.hazards_missed += 1
        if seam.struck is not None:
            self.history.append(f"  struck: {seam.struck}")
            # An object whose event the crash or fault prevented is left over.
            self.unrecorded |= seam.written
        if seam.dead and not crashed:
            # Code ran on after the death and ended otherwise: a swallowed crash.
            what = "returned" if failure is None else f"raised {failure!r}"
            raise self.violation(f"{name} {what} after the process died")
        if crashed:
            self.crash_and_reopen()
            return Outcome(crashed=True)
        if failure is not None:
            return self._failed(name, failure, expected)
        if seam.fault_fired:
            # The gate and GC apply absorb a failed call; start afresh all the same.
            self.reopen()
        else:
            self.check()
            self.acknowledge()
        return Outcome(value=value)

    def _failed(
        self, name: str, error: Exception, expected: tuple[type[Exception], ...]
    ) -> Outcome:
        """Accept a fault's typed error or an expected one; reject the rest."""
        self.history.append(f"  -> {type(error).__name__}: {error}")
        if self.seam.fault_fired:
            typed = isinstance(error, (*VAULT_FAULT_ERRORS, *expected))
            if not typed or isinstance(error, BotoCoreError):
                msg = f"{name} under a network fault raised {error!r}"
                raise self.violation(msg) from error
            self.counters.fault_errors += 1
            self.reopen()
            return Outcome(error=error)
        if not isinstance(error, expected):
            raise self.violation(f"{name} raised {error!r}") from error
        self.check()
        self.acknowledge()
        return Outcome(error=error)

    def store_artifact(
        self, size: int, hazard: Hazard | None = None
    ) -> ArtifactReference | None:
        """Spill a tool output of about `size` bytes through the gate; its handle."""
        self._numbers += 1
        line = f"{self._numbers:06d} tool output line, seed {self.seed}\n"
        text = line * max(1, size // len(line))
        self.counters.multipart += size >= MULTIPART
        outcome = self.attempt(
            f"store {size}",
            lambda: self.session.externalizer.process(text, "bash"),
            hazard=hazard,
        )
        if not outcome.ok:
            return None
        reason = outcome.value.reason
        if self.struck is not None:  # a fault: the gate keeps the output inline
            if reason != "store_failed":
                raise self.violation(f"a spill under a network fault was {reason}")
            return None
        if reason != "spilled":
            raise self.violation(f"a spill of {size} bytes was {reason}")
        reference: ArtifactReference = outcome.value.artifact
        filename = self.session.externalizer.store.resolve(reference.handle)
        self.oracle.spills[filename] = reference.content_sha256
        self.stored[filename] = reference
        return reference

    def read_back(
        self, reference: ArtifactReference, hazard: Hazard | None = None
    ) -> None:
        """Read a spill whole through the reader (it checks every chunk's digest)."""
        outcome = self.attempt(
            f"read {reference.handle}",
            lambda: self.session.externalizer.read_artifact_bytes(
                reference.handle, 0, reference.size_bytes
            ),
            hazard=hazard,
            expected=(ArtifactAccessError,),
        )
        filename = self.session.externalizer.store.resolve(reference.handle)
        artifact = self.artifacts.get(filename)
        state = None if artifact is None else artifact.artifact_state
        if outcome.ok:
            if hashlib.sha256(outcome.value).hexdigest() != reference.content_sha256:
                raise self.violation(f"I1: {filename} reads back other bytes")
        elif outcome.error is not None and self.struck is None and state in STORED:
            msg = f"I1: {state} artifact {filename} is refused: {outcome.error!r}"
            raise self.violation(msg)

    def _claim(
        self, reference: ArtifactReference, retain_hours: float | None
    ) -> ArtifactRetentionClaim:
        until = None
        if retain_hours is not None:
            until = self.clock.now() + timedelta(hours=retain_hours)
        return ArtifactRetentionClaim.from_memory_reference(
            reference.for_memory(), retain_until=until
        )

    def _new_transaction(self, reference: ArtifactReference) -> str:
        tx = f"tx-{len(self.transactions) + 1:04d}"
        self.transactions.append(tx)
        memory = reference.for_memory()
        self.owner.references[tx] = memory
        # Taken now, replayed later by a zombie: the owner's own retry handle.
        self.publishers[tx] = self.owner.publisher(memory, tx)
        return tx

    def prepare(
        self,
        reference: ArtifactReference,
        retain_hours: float | None,
        hazard: Hazard | None = None,
    ) -> str:
        """Record PREPARED only (a writer about to publish)."""
        claim = self._claim(reference, retain_hours)
        tx = self._new_transaction(reference)
        self.attempt(
            "prepare",
            lambda: self.session.journal.prepare(claim, transaction_id=tx),
            hazard=hazard,
            expected=(ArtifactLeaseJournalError,),
        )
        return tx

    def publish_flow(
        self,
        reference: ArtifactReference,
        retain_hours: float | None,
        knob: str | None,
        hazard: Hazard | None = None,
    ) -> str:
        """Prepare, publish through the owner (with a failure knob), commit."""
        claim = self._claim(reference, retain_hours)
        tx = self._new_transaction(reference)
        if knob is not None:
            getattr(self.owner, knob).add(tx)
        self.attempt(
            f"publish_reference[{knob}]",
            lambda: self.session.journal.publish_reference(
                claim, self.publishers[tx], transaction_id=tx
            ),
            hazard=hazard,
            expected=(
                ArtifactLeaseJournalError,
                ArtifactPublicationRejected,
                TimeoutError,
            ),
        )
        return tx

    def commit(self, tx: str, hazard: Hazard | None = None) -> None:
        """Record COMMITTED for a lease the owner holds (the writer's last step)."""
        self.attempt(
            f"commit {tx}",
            lambda: self.session.journal.commit(tx),
            hazard=hazard,
            expected=(ArtifactLeaseJournalError,),
        )

    def remove(self, tx: str, hazard: Hazard | None = None) -> None:
        """Delete the owner's reference, then record RELEASED (S4.9)."""
        self.attempt(
            f"remove_reference {tx}",
            lambda: self.session.journal.remove_reference(tx, self.owner.remover(tx)),
            hazard=hazard,
            expected=(ArtifactLeaseJournalError,),
        )

    def reconcile(self, knobs: dict[str, str], hazard: Hazard | None = None) -> None:
        """Reconcile PREPARED and COMMITTED leases with the owner (S5.2)."""
        for tx, knob in knobs.items():
            getattr(self.owner, knob).add(tx)

        def both() -> None:
            journal = self.session.journal
            journal.reconcile_pending(self.owner)
            journal.reconcile_releases(self.owner)

        try:
            self.attempt(f"reconcile {knobs}", both, hazard=hazard)
        finally:
            for tx, knob in knobs.items():
                getattr(self.owner, knob).discard(tx)

    def zombie_publish(self, tx: str) -> None:
        """Replay a publisher taken before (a stale writer's late retry)."""
        self.history.append(f"zombie publish {tx}")
        self.unchecked = True
        if self._lease_phase(tx) is None:
            return  # never prepared: no writer ever called this publisher
        for knob in ("lose_receipt_for", "reject_publish_for"):
            getattr(self.owner, knob).discard(tx)
        try:
            self.publishers[tx]()
        except (ArtifactPublicationRejected, ValueError):
            self.counters.zombie_rejected += 1
        else:
            self.counters.zombie_landed += 1
        self.check()

    def advance(self, seconds: float) -> None:
        """Move the clock (retain_until, the orphan TTL and old uploads expire)."""
        self.history.append(f"advance {seconds} s")
        self.unchecked = True
        self.clock.advance(seconds)
        self.check()

    def gc_plan(
        self, ttl: float = ORPHAN_TTL, hazard: Hazard | None = None
    ) -> ArtifactCleanupPlan | None:
        """Plan GC against the journal (S6.1); an old eventless object is adopted."""
        policy = ArtifactCleanupPolicy(orphan_ttl_seconds=ttl, dry_run=False)
        at = self.clock.now()
        waiting = {
            found.name: found.last_modified
            for found in self._list()
            if found.name in self.unrecorded
        }
        outcome = self.attempt(
            f"gc plan, TTL {ttl} s",
            lambda: self.session.externalizer.plan_cleanup_from_journal(
                self.session.journal, policy=policy, now=at
            ),
            hazard=hazard,
        )
        if not outcome.ok:
            return None
        self._sync_events()
        for name, modified in waiting.items():
            if at - modified >= object_gc.ORPHAN_GRACE and name not in self.artifacts:
                msg = f"O1: GC planned at {at} but did not adopt {name} ({modified})"
                raise self.violation(msg)
        plan: ArtifactCleanupPlan = outcome.value
        return plan

    def gc_apply(self, plan: ArtifactCleanupPlan, hazard: Hazard | None = None) -> None:
        """Apply a plan, however stale (S6.2)."""
        self.oracle.exposed |= {
            d.filename
            for d in plan.decisions
            if d.status is ArtifactCleanupStatus.PLANNED_DELETE
        }
        outcome = self.attempt(
            "gc apply",
            lambda: self.session.externalizer.apply_cleanup_from_journal(
                plan, self.session.journal, now=self.clock.now()
            ),
            hazard=hazard,
        )
        if outcome.ok:
            report: ArtifactCleanupReport = outcome.value
            self._sync_events()
            for decision in report.decisions:
                if decision.status is not ArtifactCleanupStatus.DELETED:
                    continue
                artifact = self.artifacts.get(decision.filename)
                state = None if artifact is None else artifact.artifact_state
                if state is not ArtifactState.DELETED:
                    msg = f"GC reported {decision.filename} deleted; it is {state}"
                    raise self.violation(msg)

    def collect(self, ttl: float = ORPHAN_TTL, hazard: Hazard | None = None) -> None:
        """Plan and apply at once (the CLI's `gc --apply`); a hazard hits the apply."""
        plan = self.gc_plan(ttl)
        if plan is not None:
            self.gc_apply(plan, hazard)

    # ------------------------------------------------------------------ oracle

    def violation(self, message: str) -> InvariantViolation:
        """Build the failure, naming everything that replays it."""
        tail = "\n".join(self.history[-40:])
        return InvariantViolation(
            f"{message}\nworld seed {self.seed}, vault session {self.session_id} "
            f"in {self.location.url}; last operations:\n{tail}"
        )

    def acknowledge(self) -> None:
        """Take the journal as it is now as acknowledged (an operation returned)."""
        journal = self._journal_bytes()
        self.oracle.journal = journal
        self.oracle.sequence = max(self.oracle.sequence, _last_sequence(journal))

    def check(self) -> None:
        """Assert I1 to I4, O1 and O2 on the open session (I5 and O3 at recovery)."""
        if self.violations:
            raise self.violation(self.violations[0])
        listed = {found.name: found for found in self._list()}
        self._sync_events()
        self._check_objects(listed)
        self._check_protected(listed)
        self._check_journal()
        self._check_owner()
        self.unchecked = False

    def describe(self) -> dict[str, Any]:
        """Return the state recovery must reach, for comparing two recoveries."""
        self._sync_events()
        journal = self._journal_bytes()
        return {
            "objects": {found.name: found.etag for found in self._list()},
            "artifacts": {name: a.state for name, a in sorted(self.artifacts.items())},
            "leases": {tx: self._lease_phase(tx) for tx in self.transactions},
            "uploads": sorted(upload["Key"] for upload in self._uploads()),
            "journal": hashlib.sha256(journal).hexdigest(),
            "journal_records": _last_sequence(journal),
        }

    def _check_objects(self, listed: dict[str, Listed]) -> None:
        """O1 and O2 over every object and every artifact's events."""
        for name in sorted(listed.keys() - self.artifacts.keys()):
            if name not in self.unrecorded:
                raise self.violation(f"O1: object {name} has no artifact event")
        # An eventless object gone, or never made: nothing was left after all.
        self.unrecorded &= listed.keys()
        for name, artifact in sorted(self.artifacts.items()):
            self.unrecorded.discard(name)
            self._check_history(name, self.histories[name])
            state = artifact.artifact_state
            if state in STORED and name not in listed:
                msg = f"O2: the object of {state} artifact {name} is gone"
                raise self.violation(msg)
            if state is ArtifactState.DELETED and name in listed:
                msg = f"O2: deleted artifact {name} still has its object"
                raise self.violation(msg)

    def _check_history(self, name: str, kinds: list[str]) -> None:
        if "MarkedLost" in kinds:
            raise self.violation(f"O2: {name} was recorded lost: {kinds}")
        for before, kind in itertools.pairwise(["", *kinds]):
            if kind == "Deleted" and before != "Quarantined":
                raise self.violation(f"O2: {name} deleted with no intent: {kinds}")

    def _on_delete(self, name: str, written: set[str]) -> None:
        """O2 when a delete is sent: its intent must be recorded (checked later)."""
        self._sync_events()
        artifact = self.artifacts.get(name)
        if artifact is None and name in written:
            return  # its writer undoing its own unrecorded upload
        if artifact is None or artifact.artifact_state is not ArtifactState.QUARANTINED:
            state = None if artifact is None else artifact.state
            msg = f"O2: a delete of {name} was sent while it was {state}"
            self.violations.append(msg)

    def _check_protected(self, listed: dict[str, Listed]) -> None:
        """I1: what a live lease protects, and every acknowledged spill, is intact."""
        recovery = self.session.journal.recover(now=self.clock.now())
        protected = {
            claim.parsed_source_id.filename: claim.content_sha256
            for claim in recovery.claims
        }
        for state in recovery.states:
            claim = state.transaction.claim
            if state.current_phase is ArtifactLeasePhase.PREPARED:
                protected[claim.parsed_source_id.filename] = claim.content_sha256
        for filename, digest in protected.items():
            self._check_intact(filename, digest, "protected artifact", listed)
            # The server's own word too: size, ETag and SHA-256 checksum.
            content = self.artifacts[filename].stored_content
            try:
                vault_store(self.session).confirm(filename, content)
            except (FileNotFoundError, ArtifactIntegrityError) as error:
                msg = f"I1: protected artifact {filename}: {error}"
                raise self.violation(msg) from None
        for filename, digest in self.oracle.spills.items():
            if filename not in self.oracle.exposed:
                self._check_intact(filename, digest, "acknowledged spill", listed)

    def _check_intact(
        self, filename: str, digest: str, what: str, listed: dict[str, Listed]
    ) -> None:
        """Stored, recorded with `digest`, and the listed object is the recorded one."""
        artifact = self.artifacts.get(filename)
        content = None if artifact is None else artifact.stored_content
        if artifact is None or artifact.artifact_state not in STORED or content is None:
            state = None if artifact is None else artifact.state
            raise self.violation(f"I1: {what} {filename} is {state}")
        if content.content_sha256 != digest:
            msg = f"I1: {what} {filename} is recorded with another digest"
            raise self.violation(msg)
        found = listed.get(filename)
        facts = artifact.object_facts
        if found is None:
            raise self.violation(f"I1: {what} {filename} is absent")
        if (found.etag, found.size) != (facts.etag, content.size_bytes):
            msg = (
                f"I1: {what} {filename} is {found.size} bytes, ETag {found.etag}; "
                f"recorded {content.size_bytes} bytes, ETag {facts.etag}"
            )
            raise self.violation(msg)

    def _check_journal(self) -> None:
        journal = self._journal_bytes()
        if not journal.startswith(self.oracle.journal):
            msg = (
                f"I2: acknowledged journal bytes lost or changed "
                f"({len(self.oracle.journal)} acknowledged, {len(journal)} now)"
            )
            raise self.violation(msg)
        if _last_sequence(journal) < self.oracle.sequence:
            raise self.violation("I4: the journal sequence went back")

    def _check_owner(self) -> None:
        for tx, record in self.owner.records().items():
            seen = self.oracle.generations.get(tx, 0)
            if record.generation < seen:
                msg = f"I4: owner generation of {tx}: {seen} -> {record.generation}"
                raise self.violation(msg)
            self.oracle.generations[tx] = record.generation
            if not self.owner.holds(tx):
                continue
            phase = self._lease_phase(tx)
            if phase not in PROTECTING:
                msg = f"I3: the owner holds {tx}, which the store has as {phase}"
                raise self.violation(msg)

    # ------------------------------------------------------------ oracle reads

    def _lease_phase(self, tx: str) -> ArtifactLeasePhase | None:
        assert self.reader is not None
        lease = self.reader.find_lease(tx)
        return None if lease is None else lease.phase

    def _journal_bytes(self) -> bytes:
        if self.journal_table is None:
            return b""
        return self.journal_table.read_from(0)

    def _sync_events(self) -> None:
        """Fold the artifact events recorded since the last look; reload those."""
        reader = self.reader
        assert reader is not None
        changed = set()
        for note in reader.notifications(after=self._position):
            self._position = note.id
            self.lease_events += note.topic.startswith(LEASE_TOPIC)
            if not note.topic.startswith(ARTIFACT_TOPIC):
                continue
            name = self._names.get(note.originator_id)
            if name is None:  # the creation event comes first and names it
                event = reader.mapper.to_domain_event(note)
                name = self._names[note.originator_id] = event.filename
            kind = note.topic.removeprefix(ARTIFACT_TOPIC)
            self.histories.setdefault(name, []).append(kind)
            changed.add(name)
            # Objects with no event are only left by crashes and faults here.
            self.counters.adopted += kind == "Adopted"
            self.counters.gc_deleted += kind == "Deleted"
        for name in changed:
            self.artifacts[name] = reader.get_artifact(name)

    def _list(self) -> list[Listed]:
        """Every object under the session's prefix (the seam passes it uncounted)."""
        found: list[Listed] = []
        token: dict[str, str] = {}
        while True:
            page = self.client.list_objects_v2(
                Bucket=self.location.bucket, Prefix=self.prefix, **token
            )
            found.extend(
                Listed(
                    item["Key"][len(self.prefix) :],
                    int(item["Size"]),
                    str(item.get("ETag", "")),
                    item["LastModified"],
                )
                for item in page.get("Contents", [])
            )
            if not page.get("IsTruncated"):
                return found
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def _uploads(self) -> list[dict[str, Any]]:
        if not self.seam.uploads_started:
            return []  # a listing saved: no multipart upload was ever started
        page = self.client.list_multipart_uploads(
            Bucket=self.location.bucket, Prefix=self.prefix
        )
        return list(page.get("Uploads", []))

    def _stale_uploads(self) -> list[str]:
        now = self.clock.now()
        return [
            upload["Key"]
            for upload in self._uploads()
            if now - upload["Initiated"] >= STALE_UPLOAD_AGE
        ]


def _difference(expected: dict[str, Any], found: dict[str, Any]) -> str:
    return "\n".join(
        f"  {key}: first {value!r}\n  {key}: second {found.get(key)!r}"
        for key, value in expected.items()
        if value != found.get(key)
    )
