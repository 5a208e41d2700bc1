"""Project lease events to the journal and the lease view in order (S4.5, S8.1).

`sync()` runs under the session lock. It reads the journal from the
checkpoint on (other processes may have appended since), checks every record
there against the projection of the stored event at its position, appends the
records of the events nobody journaled yet (J3), and folds the same events
into the live-lease view. So opening a session verifies the journal
incrementally, and a journal shorter than the store (a crash between a store
commit and its append) is caught up. The view is saved to the store every
`SAVE_EVERY` folded events and when the session closes; it is a cache.
"""

from __future__ import annotations

import json
import logging
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from uuid import UUID

from spillvault.domain.artifact import ARTIFACT_CREATED_TOPICS, Artifact
from spillvault.domain.enums import ArtifactLeasePhase
from spillvault.domain.errors import ArtifactLeaseJournalError, ArtifactStoreConflict
from spillvault.domain.journal_records import (
    JournalChain,
    JournalLine,
    JournalRecord,
    RecordProjector,
    decode_line,
    encode,
    split_journal,
)
from spillvault.domain.lease import LEASE_PHASE_AFTER, Lease
from spillvault.domain.machines import LEASE_MACHINE
from spillvault.domain.session_view import (
    SESSION_VIEW_ID,
    ArtifactRecord,
    JournalCheckpoint,
    LiveLease,
    SessionView,
    next_artifact_record,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from eventsourcing.persistence import Notification

    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.adapters.storage.journal_file import JournalFile
    from spillvault.adapters.storage.journal_table import JournalTable

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

SAVE_EVERY = 1000
"""Events folded or skipped after which `sync` saves the view (a reopen reads fewer)."""
SAVE_SKIPPED = 256
"""Skipped (non-lease) events that make `save` worth a write on their own."""
LeaseEvent = tuple[int, str, ArtifactLeasePhase, dict[str, Any]]
"""A decoded lease event: store position, transaction id, phase, its fields."""
_VERIFY_BLOCK = 1 << 20  # journal bytes read at a time by `verify_whole`
_LOOK_BACK = 4096  # bytes read before the checkpoint to find its line
_LEASE_TOPIC = "spillvault:Lease."
_ARTIFACT_TOPIC = "spillvault:Artifact."
_PHASE_OF_TOPIC = {
    topic: ArtifactLeasePhase(phase) for topic, phase in LEASE_PHASE_AFTER.items()
}
_PREPARED = ArtifactLeasePhase.PREPARED
# Each phase's name, and its events' time field (named after the phase entered).
_PHASE_FIELDS = {
    phase: (phase.value, f"{phase.value}_at") for phase in ArtifactLeasePhase
}
_LIVE = LEASE_MACHINE.live_states
# A lease event's fields are primitives (S8.1) and the store neither encrypts
# nor compresses its events: the stored state is their JSON. Reading it as
# such builds no domain event and runs no transcoder hook per object (the one
# field a hook would convert, eventsourcing's `timestamp`, is not used).
_read_state = json.JSONDecoder().decode


@dataclass(frozen=True)
class JournalReport:
    """What a whole verification or a repair saw."""

    records: int
    end: int
    torn_bytes: int

    def to_dict(self) -> dict[str, int]:
        """Return a JSON-ready mapping."""
        return {"records": self.records, "end": self.end, "torn_bytes": self.torn_bytes}


class LeaseProjection:
    """One session's lease view and journal writer; keep one per session."""

    def __init__(
        self, session: SessionHandles, journal: JournalFile | JournalTable
    ) -> None:
        self._session = session
        self._file = journal
        self._load_view()

    def _load_view(self) -> None:
        """Take the state saved in the store, dropping anything folded since."""
        self._view = self._session.store.get_session_view() or SessionView.start()
        self._position = self._view.position
        self._checkpoint = self._view.checkpoint
        # The checkpoint's line as this process wrote or verified it, if it did.
        self._checkpoint_line: bytes | None = None
        self._live: dict[str, dict[str, Any]] = dict(self._view.live)
        self._artifacts = {
            name: ArtifactRecord.from_entry(entry)
            for name, entry in self._view.artifacts.items()
        }
        self._artifact_ids: dict[UUID, str] = {}
        self._changed_artifacts: dict[str, ArtifactRecord] = {}
        self._ids: dict[UUID | str, str] = {}
        self._changed: dict[str, dict[str, Any]] = {}
        self._closed: set[str] = set()
        self._folded = 0
        self._seen = 0
        self._force_full_save = False
        self._stale = False

    @property
    def checkpoint(self) -> JournalCheckpoint:
        """The verified end of the journal, as of the last `sync()`."""
        return self._checkpoint

    @property
    def position(self) -> int:
        """The last store position folded in."""
        return self._position

    def live_leases(self) -> dict[str, LiveLease]:
        """Sync, then return the prepared and committed leases."""
        with self._session.lock:
            self._sync_locked()
            live = dict(self._live)
        return {tx: LiveLease.from_entry(tx, e) for tx, e in live.items()}

    def artifact_filenames(self) -> list[str]:
        """Sync, then return every artifact name with a creation event, in order."""
        with self._session.lock:
            self._sync_locked()
            return list(self._artifacts)

    def artifact_records(self) -> dict[str, ArtifactRecord]:
        """Sync, then return every artifact's state and recorded content, by name."""
        with self._session.lock:
            self._sync_locked()
            return dict(self._artifacts)

    def sync(self) -> None:
        """Verify the journal's new records, append missing ones, fold the events."""
        with self._session.lock:
            self._sync_locked()

    def sync_recorded(self) -> None:
        """`sync` right after this process saved: project its events unread if it can.

        When the store's own saves hold the events at the positions right
        after the one folded last, they are exactly the store's next events
        (`SessionStore.recorded_after`) and are projected without reading the
        store; anything recorded after them is left for a later sync. The
        journal is still verified from its checkpoint; lines that others
        appended past it send this back to reading the store.
        """
        with self._session.lock:
            self._sync_locked(recorded=True)

    def save(self) -> None:
        """Save the view if it folded leases or skipped many events since last saved."""
        if not self._folded and self._seen < SAVE_SKIPPED:
            return
        with self._session.lock:
            self._save_locked()

    # ------------------------------------------------------------------ sync

    def _sync_locked(self, *, recorded: bool = False) -> None:
        if self._stale:
            self._load_view()
        try:
            self._sync_steps(recorded=recorded)
        except BaseException:
            # A half-done sync may have folded events it never journaled: start
            # again from the saved view, so the next sync redoes them in order.
            self._stale = True
            with suppress(Exception):
                self._load_view()
            raise

    def _sync_steps(self, *, recorded: bool) -> None:
        start = self._checkpoint
        data = self._read_after(start)
        lines, complete_end, _torn = split_journal(data, start_offset=start.end)
        notes = (
            self._session.store.recorded_after(self._position)
            if recorded and not lines
            else None
        )
        chain = JournalChain(
            session_id=self._session.session_id,
            next_line=start.sequence + 1,
            last_sequence=start.sequence,
            last_sha256=start.sha256,
            last_position=start.position,
        )
        journaled = iter(
            [chain.accept(decode_line(line, chain.next_line)) for _, line in lines]
        )
        projector = self._projector(start)
        missing: list[JournalLine] = []
        line = self._checkpoint_line
        events = (
            self._new_lease_events() if notes is None else self._lease_events_in(notes)
        )
        for event in events:
            line = _project(projector.line, event)
            found = next(journaled, None)
            if found is None:
                missing.append(line)
            elif encode(found) != line:
                msg = (
                    f"journal line {projector.last_sequence} does not match the "
                    f"stored event at position {projector.last_position}"
                )
                raise ArtifactLeaseJournalError(msg)
            _, transaction_id, phase, fields = event
            self._fold(transaction_id, phase, fields)
        extra = next(journaled, None)
        if extra is not None:
            msg = f"journal line {extra.sequence} has no event in the store"
            raise ArtifactLeaseJournalError(msg)
        if missing and self._session.read_only:
            # Nothing may be appended: the checkpoint stays put, and the next
            # sync folds again from the saved view instead of trusting this one.
            self._stale = True
            return
        end = complete_end
        if missing:
            end = self._file.append_lines(missing, expect_end=complete_end)
        self._checkpoint = JournalCheckpoint(
            end,
            projector.last_sequence,
            projector.last_sha256,
            projector.last_position,
        )
        self._checkpoint_line = line
        # Saving when the journal is first written makes a deleted journal
        # evident from then on: the checkpoint says how much must be there.
        if max(self._folded, self._seen) >= SAVE_EVERY or (missing and not start.end):
            self._save_locked()

    def _read_after(self, checkpoint: JournalCheckpoint) -> bytes:
        """Return the journal from the checkpoint on, once its last line is checked."""
        if checkpoint.sequence == 0:
            return self._file.read_from(checkpoint.end)
        back = _LOOK_BACK
        while True:
            begin = max(0, checkpoint.end - back)
            data = self._file.read_from(begin)
            verified = data[: checkpoint.end - begin]
            if len(verified) < checkpoint.end - begin or not verified.endswith(b"\n"):
                msg = (
                    f"journal is shorter than its verified part ({checkpoint.end} "
                    f"bytes, {checkpoint.sequence} records)"
                )
                raise ArtifactLeaseJournalError(msg)
            line_start = verified.rfind(b"\n", 0, len(verified) - 1) + 1
            if line_start > 0 or begin == 0:
                last = verified[line_start:]
                if last == self._checkpoint_line:
                    # Byte for byte the line this process verified or wrote.
                    return data[len(verified) :]
                record = decode_line(last, checkpoint.sequence)
                if (record.sequence, record.sha256) != (
                    checkpoint.sequence,
                    checkpoint.sha256,
                ):
                    msg = (
                        f"journal line {checkpoint.sequence} changed after it "
                        "was verified"
                    )
                    raise ArtifactLeaseJournalError(msg)
                return data[len(verified) :]
            back *= 16

    def _new_lease_events(self) -> Iterator[LeaseEvent]:
        """Read the events after the position from the store; fold and decode them."""
        return self._lease_events_in(
            self._session.store.notifications(after=self._position)
        )

    def _lease_events_in(self, notes: Iterable[Notification]) -> Iterator[LeaseEvent]:
        """Take `notes` (the events after the position, in order) past the position.

        Artifact events are folded; lease events are decoded and yielded.
        """
        for note in notes:
            self._position = note.id
            self._seen += 1
            if note.topic.startswith(_LEASE_TOPIC):
                yield self._decode(note)
            elif note.topic.startswith(_ARTIFACT_TOPIC):
                self._fold_artifact(note)

    def lease_events(self) -> Iterator[LeaseEvent]:
        """Decode every lease event in the store, from position 0, in order."""
        for note in self._session.store.notifications(after=0):
            if note.topic.startswith(_LEASE_TOPIC):
                yield self._decode(note)

    def _all_records(self) -> Iterator[JournalRecord]:
        """Project every lease event in the store, from position 0 (J2)."""
        projector = self._projector(JournalCheckpoint())
        for event in self.lease_events():
            yield _project(projector.record, event)

    def _projector(self, checkpoint: JournalCheckpoint) -> RecordProjector:
        """Return a projector chaining records on from `checkpoint`."""
        return RecordProjector(
            self._session.session_id,
            last_sequence=checkpoint.sequence,
            last_sha256=checkpoint.sha256,
            last_position=checkpoint.position,
        )

    # --------------------------------------------------------- whole journal

    def verify_whole(self) -> JournalReport:
        """Verify every line against the store (`journal verify`, GC planning).

        A line equal to the projection of the store's event at its place
        (checked as `make_record` checks it, chained from the start) is
        canonical, hash-valid, chained and legal by construction; only a line
        that differs is decoded, to name its fault. The store's events are
        read once, in bulk, and each expected line is built and hashed once.
        """
        with self._session.lock:
            self._sync_locked()
            projector = self._projector(JournalCheckpoint())
            expected = (_project(projector.line, e) for e in self.lease_events())
            end = records = 0
            pending = b""  # bytes after `end` not yet split into lines
            while block := self._file.read_from(
                end + len(pending), limit=_VERIFY_BLOCK
            ):
                pending += block
                cut = pending.rfind(b"\n") + 1
                for line in pending[: max(cut - 1, 0)].split(b"\n") if cut else ():
                    sha256, position = projector.last_sha256, projector.last_position
                    if next(expected, None) != line + b"\n":
                        self._mismatch(line, records, sha256, position)
                    records += 1
                end, pending = end + cut, pending[cut:]
            if next(expected, None) is not None:
                msg = f"journal ends at line {records}; the store has more"
                raise ArtifactLeaseJournalError(msg)
        return JournalReport(records=records, end=end, torn_bytes=len(pending))

    def _mismatch(
        self, line: bytes, records: int, last_sha256: str, last_position: int
    ) -> NoReturn:
        """Name the fault of the line after `records` good ones (not the store's)."""
        line_no = records + 1
        chain = JournalChain(
            session_id=self._session.session_id,
            last_sequence=records,
            last_sha256=last_sha256,
            last_position=last_position,
            next_line=line_no,
        )
        chain.accept(decode_line(line, line_no))
        msg = f"journal line {line_no} does not match the store"
        raise ArtifactLeaseJournalError(msg)

    def rebuild(self, *, suffix: str) -> JournalReport:
        """Rebuild the journal from the store; the old file is kept aside (J7)."""
        self._session.check_writable("repair the journal")
        with self._session.lock:
            records = list(self._all_records())
            end = self._file.replace_with(records, keep_aside_suffix=suffix)
            last = records[-1] if records else None
            self._checkpoint = (
                JournalCheckpoint(end, last.sequence, last.sha256, last.position)
                if last is not None
                else JournalCheckpoint()
            )
            self._checkpoint_line = None
            self._rebuild_live()
            self._save_locked()
        return JournalReport(records=len(records), end=end, torn_bytes=0)

    def _rebuild_live(self) -> None:
        """Fold every lease event again (after a repair nothing cached is trusted)."""
        self._live.clear()
        self._changed.clear()
        position = self._position
        self._position = 0
        for _, transaction_id, phase, fields in self._new_lease_events():
            self._fold(transaction_id, phase, fields)
        self._position = max(self._position, position)
        self._force_full_save = True

    def _decode(self, note: Notification) -> LeaseEvent:
        phase = _PHASE_OF_TOPIC.get(note.topic)
        if phase is None:
            msg = f"unknown lease event {note.topic!r} at position {note.id}"
            raise ArtifactLeaseJournalError(msg)
        fields: dict[str, Any] = _read_state(note.state.decode("utf-8"))
        # Keyed as the recorder gives it (ours give UUIDs): no conversion per event.
        lease_id = note.originator_id
        if phase is _PREPARED:
            transaction_id = str(fields["transaction_id"])
            self._ids[lease_id] = transaction_id
        else:
            transaction_id = self._ids.get(lease_id) or self._transaction_of(lease_id)
        return note.id, transaction_id, phase, fields

    def _transaction_of(self, lease_id: UUID | str) -> str:
        """Map a lease this process did not see prepared: by the view, or the store."""
        # Leases prepared before this process opened the view: map them at once.
        self._ids.update({Lease.create_id(tx): tx for tx in self._live})
        if lease_id not in self._ids:
            lease = self._session.store.get_lease_by_id(UUID(str(lease_id)))
            self._ids[lease_id] = lease.transaction_id
        return self._ids[lease_id]

    def _fold(
        self, transaction_id: str, phase: ArtifactLeasePhase, fields: dict[str, Any]
    ) -> None:
        self._folded += 1
        if phase is _PREPARED:
            entry = {
                "phase": phase.value,
                "claim": dict(fields["claim"]),
                "prepared_at": fields["prepared_at"],
            }
        elif phase in _LIVE:
            base = self._live.get(transaction_id) or self._entry_from_store(
                transaction_id
            )
            entry = {**base, "phase": phase.value}
        else:
            self._live.pop(transaction_id, None)
            self._changed.pop(transaction_id, None)
            self._closed.add(transaction_id)
            return
        self._live[transaction_id] = entry
        self._changed[transaction_id] = entry
        self._closed.discard(transaction_id)

    def _fold_artifact(self, note: Notification) -> None:
        event = self._session.store.mapper.to_domain_event(note)
        artifact_id = UUID(str(note.originator_id))
        if note.topic in ARTIFACT_CREATED_TOPICS:
            filename = str(event.__dict__["filename"])
            self._artifact_ids[artifact_id] = filename
        else:
            filename = self._artifact_of(artifact_id)
        record = next_artifact_record(
            note.topic, event.__dict__, self._artifacts.get(filename)
        )
        self._artifacts[filename] = record
        self._changed_artifacts[filename] = record

    def _artifact_of(self, artifact_id: UUID) -> str:
        if artifact_id not in self._artifact_ids:
            # Artifacts created before this process opened the view: map them once.
            self._artifact_ids.update(
                {Artifact.create_id(name): name for name in self._artifacts}
            )
        if artifact_id not in self._artifact_ids:
            msg = f"an artifact event for an artifact with no creation: {artifact_id}"
            raise ArtifactLeaseJournalError(msg)
        return self._artifact_ids[artifact_id]

    def _entry_from_store(self, transaction_id: str) -> dict[str, Any]:
        lease = self._session.store.get_lease(transaction_id)
        return {"claim": dict(lease.claim_data), "prepared_at": lease.prepared_at}

    # ------------------------------------------------------------------ save

    def _save_locked(self) -> None:
        if self._session.read_only:
            return  # the view is a cache: a read-only session folds it again
        store = self._session.store
        view = self._view
        changed = dict(self._changed)
        closed = set(self._closed)
        artifacts = dict(self._changed_artifacts)
        if self._force_full_save:
            changed, closed, artifacts = self._difference(view)
        for _ in range(2):
            view.advance(
                self._position, self._checkpoint, changed, sorted(closed), artifacts
            )
            try:
                store.save_aggregates(view)
                break
            except ArtifactStoreConflict:
                # Another process saved the view: write the whole difference
                # from its state (ours is newer: we folded under the lock).
                view = store.get_session_view() or SessionView.start()
                changed, closed, artifacts = self._difference(view)
        else:  # pragma: no cover - two conflicts under the session lock
            logger.warning("lease view not saved: concurrent writers")
            return
        self._view = view
        self._changed.clear()
        self._closed.clear()
        self._changed_artifacts.clear()
        self._folded = self._seen = 0
        self._force_full_save = False

    def _difference(
        self, view: SessionView
    ) -> tuple[dict[str, dict[str, Any]], set[str], dict[str, ArtifactRecord]]:
        changed = {tx: e for tx, e in self._live.items() if view.live.get(tx) != e}
        artifacts = {
            name: record
            for name, record in self._artifacts.items()
            if view.artifacts.get(name) != record.to_entry()
        }
        return changed, set(view.live) - set(self._live), artifacts


def _project(projector: Callable[..., _T], event: LeaseEvent) -> _T:
    """Chain the next record of `event` with `projector.line` or `.record`."""
    position, transaction_id, phase, fields = event
    name, at_field = _PHASE_FIELDS[phase]
    return projector(
        position=position,
        transaction_id=transaction_id,
        phase=name,
        claim=fields.get("claim"),
        at=fields[at_field],
    )


def session_projection(session: SessionHandles) -> LeaseProjection:
    """Return the session's one projection (shared by everything opened on it)."""
    return session.lease_projection(
        lambda: LeaseProjection(session, session.open_journal())
    )


__all__ = [
    "SAVE_EVERY",
    "SESSION_VIEW_ID",
    "JournalReport",
    "LeaseProjection",
    "session_projection",
]
