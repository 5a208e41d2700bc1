"""A crash-testing world: a session on CrashFS, a memory owner, a clock, an oracle.

`CrashWorld` runs the real code (sessions, the spill gate, the retention
journal, reconciliation, GC) on a `CrashFS` seam. Each operation may carry a
crash point (a step offset) or an injected errno. A crash drops every Python
object of the session without a clean close (a dead process writes nothing
more), rebuilds the files as a power cut could have left them, checks that
recovery is idempotent when itself interrupted, and reopens in fresh objects.
The owner is an outside system: it survives crashes, as do the publisher
handles taken before them (a zombie writer replays them later).

After every operation and every recovery `check()` asserts issue 6's
invariants (I1 to I5 below); a failure names the seed, the operation history
and the CrashFS replay line.

- I1 no artifact a live lease protects (PREPARED, or COMMITTED before its
  retain_until) is absent or digest-mismatched; an acknowledged spill stays
  intact unless a GC apply that planned its deletion has started.
- I2 every acknowledged journal byte is recovered bit-identical.
- I3 no ABORTED (or RELEASED) transaction is live in the owner; every owner
  reference is COMMITTED or PREPARED in the store.
- I4 owner generations and the journal sequence never decrease.
- I5 recovery is idempotent: an image recovered straight, and the same image
  recovered after a crash inside a first recovery, end in the same state. When
  the crash left the first recovery's unsynced journal append as a garbage line,
  the next open fails closed (J5) and the operator's repair (J7) must reach it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.owners.owner_common import RecordState
from spillvault.adapters.session import Session, open_session
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactCleanupStatus, ArtifactLeasePhase
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactPublicationRejected,
    ArtifactRetentionError,
)
from spillvault.domain.safeguards import Safeguards
from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

from support.crashfs import CrashFS, SimulatedCrash
from support.fakes import FakeClock
from support.locks import drop_locks

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from spillvault.adapters.owners.owner_common import OwnerRecord, RecordSlot
    from spillvault.adapters.storage.fs import OsFileSystem
    from spillvault.domain.cleanup import ArtifactCleanupPlan, ArtifactCleanupReport
    from spillvault.domain.values import (
        ArtifactMemoryReference,
        ArtifactReference,
        ArtifactReferenceObservation,
    )

    from support.crashfs import Choice, DirEntries

T = TypeVar("T")
SESSION = "session-crash"
RESULTS = "tool-results"
ORPHAN_TTL = 600.0
SENTINEL = b"outside the session: never touched\n" * 64
Phase = ArtifactLeasePhase
PROTECTING = frozenset({Phase.PREPARED, Phase.COMMITTED})
# What an operation may raise for a reason of its own (not a fault or a crash).
DOMAIN_ERRORS: tuple[type[Exception], ...] = (
    ArtifactLeaseJournalError,
    ArtifactRetentionError,
    ArtifactAccessError,
    ArtifactIntegrityError,
)
# What an injected errno may surface as: the OSError itself or a SPEC error.
FAULT_ERRORS: tuple[type[Exception], ...] = (OSError, *DOMAIN_ERRORS)


class InvariantViolation(AssertionError):
    """An invariant failed: the message replays the case."""


class WatchedOwner(InMemoryOwner):
    """The in-memory owner, with a view of its records for the oracle.

    One more knob: `publish_between_for` lands the transaction's publish
    between a fence's read and its seal, as a zombie writer could in an
    optimistic store (the generation fence must then refuse the seal).
    """

    def __init__(self, **knobs: Any) -> None:
        super().__init__(**knobs)
        self.publish_between_for: set[str] = set()
        self.references: dict[str, ArtifactMemoryReference] = {}

    def _observe(
        self, transaction_id: str, slot: RecordSlot
    ) -> ArtifactReferenceObservation:
        observation = super()._observe(transaction_id, slot)
        reference = self.references.get(transaction_id)
        if transaction_id in self.publish_between_for and reference is not None:
            record = slot.load()
            with contextlib.suppress(ArtifactPublicationRejected, ValueError):
                published = record.published(transaction_id, reference)
                if published is not None:
                    slot.save(record, published)
        return observation

    def records(self) -> dict[str, OwnerRecord]:
        """Return every transaction id's record as it is now."""
        with self._slots_guard:
            slots = dict(self._slots)
        return {tx: slot.load() for tx, slot in slots.items()}

    def holds(self, transaction_id: str) -> bool:
        """Say whether the owner holds a reference under `transaction_id`."""
        record = self.records().get(transaction_id)
        return record is not None and record.state is RecordState.PUBLISHED


@dataclass(frozen=True)
class Fault:
    """An errno (or a short write) injected at a step offset into an operation."""

    offset: int
    error: int | Literal["short"]
    persistent: bool = False


@dataclass
class Outcome:
    """How an operation ended: its value, or why it has none."""

    value: Any = None
    crashed: bool = False
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """Say whether the operation returned."""
        return not self.crashed and self.error is None


@dataclass
class Oracle:
    """What the world has been told is durable, kept across crashes."""

    journal: bytes = b""
    sequence: int = 0
    spills: dict[str, str] = field(default_factory=dict)  # filename -> digest
    exposed: set[str] = field(default_factory=set)  # GC may have deleted these
    attacked: set[str] = field(default_factory=set)  # changed by the attacker
    generations: dict[str, int] = field(default_factory=dict)


@dataclass
class Counters:
    """What the run exercised, for the README's figures."""

    operations: int = 0
    crashes: int = 0
    crashes_in_recovery: int = 0
    faults: int = 0
    fault_errors: int = 0
    zombie_landed: int = 0
    zombie_rejected: int = 0
    gc_deleted: int = 0
    journals_refused: int = 0


class CrashWorld:
    """One session under test, its owner and clock, and the oracle."""

    def __init__(
        self,
        base: Path,
        *,
        seed: int,
        start: datetime | None = None,
        safeguards: Safeguards | None = None,
        fs_factory: Callable[..., CrashFS] = CrashFS,
        owner: WatchedOwner | None = None,
    ) -> None:
        self.base = base
        self.path = base / SESSION
        self.seed = seed
        self.rng = random.Random(seed)  # noqa: S311 - simulation, not secrets
        self.clock = FakeClock(start or datetime.now(UTC))
        # A planted-bug test switches one protection off (issue 7).
        self.safeguards = safeguards or Safeguards()
        self.fs_factory = fs_factory
        self.owner = owner or WatchedOwner(lock_timeout=5)
        self.oracle = Oracle()
        self.counters = Counters()
        self.history: list[str] = []
        # How the crashes inside operations rebuild the files.
        self.crash_choice: Choice | None = None
        self.crash_dir_entries: DirEntries = "lost"
        self.crash_points: list[str] = []  # the step each crash replaced
        self.last_steps = 0  # steps the last operation took, if it returned
        self.publishers: dict[str, Callable[[], None]] = {}
        self.references: dict[str, ArtifactMemoryReference] = {}
        self.transactions: list[str] = []
        self.stored: dict[str, ArtifactReference] = {}  # acknowledged spills
        self._numbers = 0
        self.sentinel = base / "outside" / "sentinel.txt"
        self.sentinel.parent.mkdir(mode=0o700)
        self.sentinel.write_bytes(SENTINEL)
        self.fs = self.fs_factory(self.path, seed=self._next_seed(), clock=self.clock)
        self.session = self._open(self.fs)
        self.acknowledge()

    # ------------------------------------------------------------- lifecycle

    def _next_seed(self) -> int:
        return self.rng.randrange(2**32)

    def _open(self, fs: CrashFS) -> Session:
        drop_locks(self.path)  # a lock left by another life binds another seam
        session = open_session(
            self.path, fs=fs, clock=self.clock, safeguards=self.safeguards
        )
        # The journal's named durable steps become crash points (S5.3's gap
        # between the owner tombstone and ABORTED holds no file operation).
        session.journal._checkpoint = fs.mark  # type: ignore[method-assign]
        return session

    def close(self) -> None:
        """Close the session cleanly, if one is open (end of a test)."""
        if hasattr(self, "session"):
            self.session.close()
            del self.session
            drop_locks(self.path)

    def _drop(self) -> None:
        """Let the session go: close descriptors, write nothing more (if crashed)."""
        session = self.session
        del self.session
        if not session.closed:
            with contextlib.suppress(SimulatedCrash):
                session._close_resources()  # a dead process saves nothing
        del session
        # A captured log record's traceback may still pin the dead session and
        # its lock, bound to the dead seam: the next life gets a fresh lock.
        drop_locks(self.path)

    def reopen(self) -> None:
        """Close cleanly and reopen in fresh objects, no crash (after an I/O error)."""
        with contextlib.suppress(*FAULT_ERRORS):
            self.session.close()
        self._drop()
        self.fs.faults.clear()
        self.session = self._open(self.fs)
        self.check()
        self.acknowledge()

    def crash_and_reopen(
        self,
        choice: Choice | None = None,
        dir_entries: DirEntries = "lost",
        *,
        interrupt_recovery: bool = True,
    ) -> None:
        """Crash now (if not already), rebuild, check I5, reopen in fresh objects."""
        self.counters.crashes += 1
        last = self.fs.steps[-1] if self.fs.steps else None
        if last is not None and last.outcome == "crash":
            self.crash_points.append(f"{last.op} {last.detail}")
        self.fs.crash()
        self._drop()
        rebuilt = self.fs.rebuild(choice, dir_entries=dir_entries)
        self.history.append(f"  crash: {self.fs.describe()}; {rebuilt.choices}")
        self._check_idempotent_recovery(interrupt=interrupt_recovery)
        self.fs = self.fs_factory(self.path, seed=self._next_seed(), clock=self.clock)
        refused = False
        try:
            self.session = self._open(self.fs)
        except ArtifactLeaseJournalError as error:
            # J5/J7: a complete line that is not a valid record (garbage or
            # zeros that landed before a newline) fails closed; an operator
            # repairs from the store. What was acknowledged must survive it.
            self.history.append(f"  -> reopen refused: {error}")
            refused = True
        if refused:
            self._repair()
        self.check()
        self.acknowledge()

    def _repair(self) -> None:
        """Check I2 on the refused journal, then run the operator's repair (J7)."""
        self.counters.journals_refused += 1
        self._check_journal()
        drop_locks(self.path)
        with open_session(
            self.path, fs=self.fs, clock=self.clock, recover=False
        ) as session:
            session.journal.repair()
        self.session = self._open(self.fs)
        self._check_journal()

    # ------------------------------------------------------------- operations

    def attempt(
        self,
        name: str,
        action: Callable[[], T],
        *,
        crash_in: int | None = None,
        fault: Fault | None = None,
        expected: tuple[type[Exception], ...] = (),
    ) -> Outcome:
        """Run one operation with an optional crash point or fault, then check."""
        self.counters.operations += 1
        start = self.fs.count
        note = f"{name} at step {start}"
        if crash_in is not None:
            self.fs.crash_at = start + crash_in
            note += f", crash_at={start + crash_in}"
        if fault is not None:
            self.counters.faults += 1
            self.fs.inject(
                start + fault.offset, fault.error, persistent=fault.persistent
            )
            note += f", {self.fs.faults[-1].describe()}"
        self.history.append(note)
        # Recover outside the handlers: a live traceback pins the old session.
        crashed = False
        failure: Exception | None = None
        try:
            value = action()
        except SimulatedCrash:
            crashed = True
        except Exception as error:  # sorted out by _failed
            failure = error
        self.last_steps = self.fs.count - start
        if failure is not None:
            return self._failed(name, failure, expected)
        if crashed:
            self.crash_and_reopen(self.crash_choice, self.crash_dir_entries)
            return Outcome(crashed=True)
        fired = any(f.fired for f in self.fs.faults)
        self._disarm()
        if fired:
            # Some faults are absorbed (a retried write); the writer may still be
            # poisoned, which the next operation would meet: start afresh.
            self.reopen()
        self.check()
        self.acknowledge()
        return Outcome(value=value)

    def _failed(
        self, name: str, error: Exception, expected: tuple[type[Exception], ...]
    ) -> Outcome:
        """Accept an injected fault's error or an expected one; reject the rest."""
        fired = any(fault.fired for fault in self.fs.faults)
        self.history.append(f"  -> {type(error).__name__}: {error}")
        if fired and isinstance(error, (*FAULT_ERRORS, *expected)):
            self.counters.fault_errors += 1
            self.fs.crash_at = None
            self.reopen()  # the journal writer may be poisoned (J4)
            return Outcome(error=error)
        if fired:
            msg = f"{name} under an injected fault raised {error!r}"
            raise self.violation(msg) from error
        if not isinstance(error, expected):
            raise error
        self._disarm()
        self.check()
        self.acknowledge()
        return Outcome(error=error)

    def _disarm(self) -> None:
        self.fs.crash_at = None
        self.fs.faults.clear()

    def store_artifact(self, size: int, **how: Any) -> ArtifactReference | None:
        """Spill a tool output of about `size` bytes; return its handle if acked."""
        self._numbers += 1
        line = f"{self._numbers:06d} tool output line, seed {self.seed}\n"
        text = line * max(1, size // len(line))
        outcome = self.attempt(
            "store", lambda: self.session.externalizer.externalize(text, "bash"), **how
        )
        if not outcome.ok:
            return None
        reference: ArtifactReference = outcome.value.artifact
        self.oracle.spills[os.path.basename(reference.path)] = reference.content_sha256
        self.stored[os.path.basename(reference.path)] = reference
        return reference

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
        self.references[tx] = memory
        self.owner.references[tx] = memory
        # Taken now, replayed later by a zombie: the owner's own retry handle.
        self.publishers[tx] = self.owner.publisher(memory, tx)
        return tx

    def prepare(
        self, reference: ArtifactReference, retain_hours: float | None, **how: Any
    ) -> str:
        """Record PREPARED only (a writer about to publish)."""
        claim = self._claim(reference, retain_hours)
        tx = self._new_transaction(reference)
        self.attempt(
            "prepare",
            lambda: self.session.journal.prepare(claim, transaction_id=tx),
            expected=(ArtifactLeaseJournalError,),
            **how,
        )
        return tx

    def publish_flow(
        self,
        reference: ArtifactReference,
        retain_hours: float | None,
        knob: str | None,
        **how: Any,
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
            expected=(
                ArtifactLeaseJournalError,
                ArtifactPublicationRejected,
                TimeoutError,
            ),
            **how,
        )
        return tx

    def commit(self, tx: str, **how: Any) -> None:
        """Record COMMITTED for a lease the owner holds (the writer's last step)."""
        self.attempt(
            "commit",
            lambda: self.session.journal.commit(tx),
            expected=(ArtifactLeaseJournalError,),
            **how,
        )

    def remove(self, tx: str, **how: Any) -> None:
        """Delete the owner's reference, then record RELEASED (S4.9)."""
        self.attempt(
            "remove_reference",
            lambda: self.session.journal.remove_reference(tx, self.owner.remover(tx)),
            expected=(ArtifactLeaseJournalError,),
            **how,
        )

    def reconcile(self, knobs: dict[str, str], **how: Any) -> None:
        """Reconcile PREPARED and COMMITTED leases with the owner (S5.2)."""
        for tx, knob in knobs.items():
            getattr(self.owner, knob).add(tx)

        def both() -> None:
            journal = self.session.journal
            journal.reconcile_pending(self.owner)
            journal.reconcile_releases(self.owner)

        try:
            self.attempt("reconcile", both, **how)
        finally:
            for tx, knob in knobs.items():
                getattr(self.owner, knob).discard(tx)

    def zombie_publish(self, tx: str) -> None:
        """Replay a publisher taken before (a stale writer's late retry)."""
        self.history.append(f"zombie publish {tx}")
        if self.session.store.find_lease(tx) is None:
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
        """Move the clock (retain_until and the orphan TTL expire)."""
        self.history.append(f"advance {seconds} s")
        self.clock.advance(seconds)
        self.check()

    def gc_plan(self, **how: Any) -> ArtifactCleanupPlan | None:
        """Plan GC against the journal (S6.1)."""
        policy = ArtifactCleanupPolicy(orphan_ttl_seconds=ORPHAN_TTL, dry_run=False)
        outcome = self.attempt(
            "gc plan",
            lambda: self.session.externalizer.plan_cleanup_from_journal(
                self.session.journal, policy=policy, now=self.clock.now()
            ),
            **how,
        )
        return outcome.value if outcome.ok else None

    def gc_apply(self, plan: ArtifactCleanupPlan, **how: Any) -> None:
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
            **how,
        )
        if outcome.ok:
            report: ArtifactCleanupReport = outcome.value
            self.counters.gc_deleted += sum(
                d.status is ArtifactCleanupStatus.DELETED for d in report.decisions
            )

    # ---------------------------------------------------------------- attacker

    def swap_for_symlink(self, filename: str) -> None:
        """Replace an artifact by a symlink to a file outside the session."""
        path = self.path / RESULTS / filename
        self.history.append(f"attacker: {filename} -> symlink outside")
        if not os.path.lexists(path):
            return
        self.oracle.attacked.add(filename)
        os.unlink(path)
        os.symlink(self.sentinel, path)
        self.fs.sync()
        self.check()

    def replace_inode(self, filename: str) -> None:
        """Replace an artifact by a new inode holding the same bytes."""
        path = self.path / RESULTS / filename
        self.history.append(f"attacker: {filename} -> new inode, same bytes")
        if not path.is_file() or path.is_symlink():
            return
        data = path.read_bytes()
        spare = path.with_name(f"{filename}.attacker")
        spare.write_bytes(data)
        spare.chmod(0o600)
        os.replace(spare, path)
        self.fs.sync()
        self.check()

    # ------------------------------------------------------------------ oracle

    def violation(self, message: str) -> InvariantViolation:
        """Build the failure, naming everything that replays it."""
        tail = "\n".join(self.history[-40:])
        return InvariantViolation(
            f"{message}\nworld seed {self.seed}; last operations:\n{tail}\n"
            f"{self.fs.report()}"
        )

    def acknowledge(self) -> None:
        """Take what is on disk now as acknowledged (after a returned operation)."""
        journal = self._journal_bytes()
        self.oracle.journal = journal
        self.oracle.sequence = max(self.oracle.sequence, _last_sequence(journal))

    def _journal_bytes(self) -> bytes:
        return _read_or_empty(self.path / RETENTION_JOURNAL_NAME)

    def check(self) -> None:
        """Assert I1 to I4 on the open session (I5 is checked at each recovery)."""
        self._check_protected()
        self._check_journal()
        self._check_owner()
        if self.sentinel.read_bytes() != SENTINEL:
            raise self.violation("a file outside the session was changed")

    def _check_protected(self) -> None:
        now = self.clock.now()
        recovery = self.session.journal.recover(now=now)
        protected = {
            claim.parsed_source_id.filename: claim.content_sha256
            for claim in recovery.claims
        }
        for state in recovery.states:
            claim = state.transaction.claim
            if state.current_phase is Phase.PREPARED:
                protected[claim.parsed_source_id.filename] = claim.content_sha256
        for filename, digest in protected.items():
            if filename in self.oracle.attacked:
                continue
            found = _digest_of(self.path / RESULTS / filename)
            if found != digest:
                msg = f"I1: protected artifact {filename} is {found or 'absent'}"
                raise self.violation(msg)
        for filename, digest in self.oracle.spills.items():
            if filename in self.oracle.exposed | self.oracle.attacked:
                continue
            found = _digest_of(self.path / RESULTS / filename)
            if found != digest:
                msg = f"I1: acknowledged spill {filename} is {found or 'absent'}"
                raise self.violation(msg)

    def _check_journal(self) -> None:
        journal = self._journal_bytes()
        if not journal.startswith(self.oracle.journal):
            msg = (
                f"I2: acknowledged journal bytes lost or changed "
                f"({len(self.oracle.journal)} acknowledged, {len(journal)} on disk)"
            )
            raise self.violation(msg)
        if _last_sequence(journal) < self.oracle.sequence:
            raise self.violation("I4: the journal sequence went back")

    def _check_owner(self) -> None:
        store = self.session.store
        for tx, record in self.owner.records().items():
            seen = self.oracle.generations.get(tx, 0)
            if record.generation < seen:
                msg = f"I4: owner generation of {tx}: {seen} -> {record.generation}"
                raise self.violation(msg)
            self.oracle.generations[tx] = record.generation
            if record.state is not RecordState.PUBLISHED:
                continue
            lease = store.find_lease(tx)
            phase = None if lease is None else lease.phase
            if phase not in PROTECTING:
                msg = f"I3: the owner holds {tx}, which the store has as {phase}"
                raise self.violation(msg)

    # -------------------------------------------------- I5: idempotent recovery

    def _check_idempotent_recovery(self, *, interrupt: bool) -> None:
        """Recover copies of the crash image straight and interrupted; compare."""
        straight = self._copy("i5-straight")
        counting = self.fs_factory(straight, seed=self.fs.seed, clock=self.clock)
        expected = self._recovered_state(straight, counting)
        steps = counting.count
        if interrupt and steps:
            self.counters.crashes_in_recovery += 1
            twice = self._copy("i5-interrupted")
            crash_at = self.rng.randint(1, steps)
            first = self.fs_factory(
                twice, seed=self._next_seed(), crash_at=crash_at, clock=self.clock
            )
            crashed = False
            try:
                self._recovered_state(twice, first)
            except SimulatedCrash:
                crashed = True  # rebuild outside the handler: its traceback pins fds
            if not crashed:
                msg = f"recovery took {steps} steps once, fewer than {crash_at} again"
                raise self.violation(msg)
            drop_locks(twice)
            first.rebuild()
            found = self._recovered_state(twice, CrashFS(twice, clock=self.clock))
            if "refused" in found and "refused" not in expected:
                # The interrupted pass's own journal append was unsynced and
                # landed as a garbage line: the next open fails closed (J5).
                # The operator's repair (J7) must then reach the same state.
                self.counters.journals_refused += 1
                found = self._repaired_state(twice)
            if found != expected:
                msg = (
                    f"I5: recovery interrupted at step {crash_at} of {steps} "
                    f"({first.describe()}) ends elsewhere:\n"
                    f"{_difference(expected, found)}"
                )
                raise self.violation(msg)
        for name in ("i5-straight", "i5-interrupted"):
            shutil.rmtree(self.base / name, ignore_errors=True)

    def _copy(self, name: str) -> Path:
        parent = self.base / name
        shutil.rmtree(parent, ignore_errors=True)
        parent.mkdir(mode=0o700)
        target = parent / SESSION
        shutil.copytree(self.path, target, symlinks=True)
        return target

    def _repaired_state(self, path: Path) -> dict[str, Any]:
        """Run the operator's journal repair (J7), then recover and describe."""
        drop_locks(path)
        with open_session(
            path, fs=CrashFS(path, clock=self.clock), clock=self.clock, recover=False
        ) as session:
            session.journal.repair()
        drop_locks(path)
        return self._recovered_state(path, CrashFS(path, clock=self.clock))

    def _recovered_state(self, path: Path, fs: OsFileSystem) -> dict[str, Any]:
        drop_locks(path)
        try:
            session = open_session(
                path, fs=fs, clock=self.clock, safeguards=self.safeguards
            )
        except ArtifactLeaseJournalError as error:
            return {"refused": type(error).__name__}
        try:
            return describe(session, [*self.transactions])
        finally:
            session.close()
            del session
            drop_locks(path)


def describe(session: Session, transactions: list[str]) -> dict[str, Any]:
    """Return the state recovery must reach, for comparing two recoveries."""
    root = os.path.join(session.path, RESULTS)
    files = {}
    for name in sorted(os.listdir(root)):
        info = os.lstat(os.path.join(root, name))
        if stat.S_ISREG(info.st_mode):
            files[name] = _digest_of(os.path.join(root, name))
        else:
            files[name] = stat.filemode(info.st_mode)
    leases = {}
    for tx in transactions:
        lease = session.store.find_lease(tx)
        leases[tx] = None if lease is None else lease.phase.value
    artifacts = {}
    for name in files:
        artifact = session.store.get_artifact(name)
        artifacts[name] = None if artifact is None else artifact.state
    journal = _read_or_empty(os.path.join(session.path, RETENTION_JOURNAL_NAME))
    return {
        "files": files,
        "artifacts": artifacts,
        "leases": leases,
        "journal": hashlib.sha256(journal).hexdigest(),
        "journal_records": _last_sequence(journal),
    }


def _difference(expected: dict[str, Any], found: dict[str, Any]) -> str:
    return "\n".join(
        f"  {key}: straight {value!r}\n  {key}: interrupted {found.get(key)!r}"
        for key, value in expected.items()
        if value != found.get(key)
    )


def _read_or_empty(path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return b""


def _digest_of(path: str | os.PathLike[str]) -> str | None:
    """Return the SHA-256 of a regular file (never through a symlink), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _last_sequence(journal: bytes) -> int:
    """Return the sequence of the last complete, decodable journal line (0 if none).

    A refused journal (garbage that landed before a newline) may end in lines
    that do not decode; the acknowledged prefix before them still counts.
    """
    complete = journal[: journal.rfind(b"\n") + 1]
    for line in reversed(complete.splitlines()):
        try:
            return int(json.loads(line)["sequence"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0
