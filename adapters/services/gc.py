"""Two-phase, fail-closed garbage collection of artifacts (S6, S2.6).

Plan: verify the journal whole, fold the live claims, scan `tool-results/`
without following links (lstat; regular artifact files opened per A4 and
hashed whole), and give every entry one S6.1 status. Apply takes the
`planned_delete` entries in batches (`BATCH_CANDIDATES`, `BATCH_BYTES`), each
under one hold of the session lock: fold the claims again, check each
candidate, record the admitted ones' quarantine intents in one commit, move
their files into a fresh `.quarantine/<intent>/`, check that each is still
exactly the planned file, unlink those that are and record the deletions (and
put-backs) in one commit; the directory fsyncs are per batch (a put-back syncs
its own). Anything unexpected puts a regular file back (or leaves it
quarantined) and is reported `race_detected`. An OSError settles the batch's
undecided intents and stops the run. The recovery pass (`resolve_quarantine`)
finishes what a crash interrupted, from the intents: the file goes back unless
it was already unlinked.
"""

from __future__ import annotations

import errno
import fcntl
import stat
import uuid
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.services.object_gc import apply_objects, plan_objects
from spillvault.adapters.storage.content_writer import digest_open_file, hash_open_file
from spillvault.adapters.storage.eventstore import retrying
from spillvault.adapters.storage.fs import (
    DIR_FLAGS,
    READ_FLAGS,
    check_private,
    open_private_dir,
)
from spillvault.adapters.storage.layout import QUARANTINE_DIR, TOOL_RESULTS_DIR
from spillvault.domain.artifact import Artifact
from spillvault.domain.cleanup import (
    ApplyOutcome,
    ArtifactClaims,
    ArtifactCleanupDecision,
    ArtifactCleanupPlan,
    ArtifactCleanupReport,
    EntryFacts,
    EntryKind,
    FileSnapshot,
    cleanup_report,
    explain,
    limit_deletions,
    missing_decision,
)
from spillvault.domain.enums import ArtifactState
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactLeaseJournalError,
    ArtifactRetentionError,
)
from spillvault.domain.machines import ARTIFACT_MACHINE
from spillvault.domain.values import artifact_number

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.domain.ports import FileSystem, StatResult
    from spillvault.domain.session_view import ArtifactRecord
    from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

Progress = Callable[[int, int], None]
"""Called with (entries done, entries in all) as a run goes."""
# GC itself moved these files out of tool-results/: not missing.
_MOVED_BY_GC = frozenset(
    ARTIFACT_MACHINE.state_after(trigger) for trigger in ("quarantine", "delete")
)
_KINDS = (
    (stat.S_ISDIR, EntryKind.DIRECTORY),
    (stat.S_ISLNK, EntryKind.SYMLINK),
    (stat.S_ISFIFO, EntryKind.FIFO),
    (stat.S_ISSOCK, EntryKind.SOCKET),
    (stat.S_ISREG, EntryKind.REGULAR),
)


def plan_cleanup_from_journal(
    session: SessionHandles,
    *,
    policy: ArtifactCleanupPolicy,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> ArtifactCleanupPlan:
    """Phase one (S6.1): verify the journal whole, then decide every entry."""
    session.check_writable("plan GC")  # planning records adopted files
    projection = session_projection(session)
    projection.verify_whole()
    at = now or session.clock.now()
    claims = ArtifactClaims.from_leases(projection.live_leases().values(), at)
    if session.artifacts is not None:
        return plan_objects(session, policy, at, claims, progress)
    return _Planner(session, policy, at, claims, progress).plan()


def plan_cleanup_from_claims(
    session: SessionHandles,
    claims: Iterator[ArtifactRetentionClaim],
    *,
    policy: ArtifactCleanupPolicy,
    now: datetime | None = None,
) -> ArtifactCleanupPlan:
    """Plan from raw claims (the seed's way); refused once a lease exists (S6.4)."""
    session.check_writable("plan GC")
    _refuse_raw_claims(session)
    at = now or session.clock.now()
    checked = [(claim, claim.is_active(at)) for claim in claims]
    for claim, _ in checked:
        claim.check_session(session.session_id)
    claimed = ArtifactClaims.from_claims(iter(checked))
    if session.artifacts is not None:
        return plan_objects(session, policy, at, claimed)
    return _Planner(session, policy, at, claimed, None).plan()


def _refuse_raw_claims(session: SessionHandles) -> None:
    projection = session_projection(session)
    if projection.live_leases() or projection.checkpoint.sequence:
        msg = (
            "this session has retention leases: raw-claims cleanup is refused; "
            "use plan_cleanup_from_journal"
        )
        raise ArtifactRetentionError(msg)


class _Planner:
    def __init__(
        self,
        session: SessionHandles,
        policy: ArtifactCleanupPolicy,
        now: datetime,
        claims: ArtifactClaims,
        progress: Progress | None,
    ) -> None:
        self.session = session
        self.fs: FileSystem = session.fs
        self.policy = policy
        self.now = now
        self.claims = claims
        self.progress = progress
        self.records = session_projection(session).artifact_records()

    def plan(self) -> ArtifactCleanupPlan:
        with _ToolResults(self.session) as results:
            names = sorted(self.fs.listdir(results.fd))
            decisions = []
            for done, name in enumerate(names, 1):
                decisions.append(self.decide(results.fd, name))
                if self.progress is not None:
                    self.progress(done, len(names))
        present = set(names)
        decisions = limit_deletions(decisions, self.policy.max_deletions)
        decisions += self.missing(present)
        return ArtifactCleanupPlan(
            session_id=self.session.session_id,
            planned_at=self.now,
            policy=self.policy,
            decisions=tuple(decisions),
        )

    def decide(self, dir_fd: int, name: str) -> ArtifactCleanupDecision:
        try:
            info = self.fs.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return self.missing_one(name, "the file vanished while scanned")
        facts = EntryFacts(name, _kind(info.st_mode))
        if facts.kind is EntryKind.REGULAR and artifact_number(name) is not None:
            facts = self.regular_facts(dir_fd, name)
        return explain(
            facts, now=self.now, orphan_ttl_seconds=self.policy.orphan_ttl_seconds
        )

    def regular_facts(self, dir_fd: int, name: str) -> EntryFacts:
        record = self.records.get(name)
        base = EntryFacts(
            name,
            EntryKind.REGULAR,
            claim_digests=self.claims.digests.get(name, ()),
            reference_count=self.claims.counts.get(name, 0),
            protected=self.claims.protects(name),
        )
        opened = _open_artifact(self.fs, dir_fd, name)
        if opened is None:  # not private, not ours, or swapped for a link meanwhile
            return EntryFacts(name, EntryKind.FOREIGN)
        fd, info = opened
        try:
            if not _try_flock(self.fs, fd):
                return _with(base, record, being_written=True)
            digest, size = digest_open_file(self.fs, fd)
        finally:
            self.fs.close(fd)
        snapshot = _snapshot(info, digest, size)
        if record is None:
            record = self.adopt(dir_fd, name)
        return _with(base, record, snapshot=snapshot)

    def adopt(self, dir_fd: int, name: str) -> ArtifactRecord | None:
        """Record a file found with no event as an orphan artifact (S6.1)."""
        opened = _open_artifact(self.fs, dir_fd, name)
        if opened is None:
            return None
        fd, _ = opened
        try:
            content, _ = hash_open_file(self.fs, fd)  # chunk digests for page faults
        finally:
            self.fs.close(fd)

        def attempt() -> None:
            if self.session.store.get_artifact(name) is None:
                adopted = Artifact.adopt(name, content, adopted_at=self.now)
                self.session.store.save_aggregates(adopted)

        with self.session.lock:
            retrying(attempt)
        return session_projection(self.session).artifact_records().get(name)

    def missing(self, present: set[str]) -> list[ArtifactCleanupDecision]:
        return [
            self.missing_one(name, f"the file is missing ({record.state.value})")
            for name, record in self.records.items()
            if name not in present and record.state not in _MOVED_BY_GC
        ]

    def missing_one(self, name: str, detail: str) -> ArtifactCleanupDecision:
        return missing_decision(
            name,
            reference_count=self.claims.counts.get(name, 0),
            protected=self.claims.protects(name),
            detail=detail,
        )


def _with(
    base: EntryFacts,
    record: ArtifactRecord | None,
    *,
    snapshot: FileSnapshot | None = None,
    being_written: bool = False,
) -> EntryFacts:
    return EntryFacts(
        filename=base.filename,
        kind=base.kind,
        artifact_state=None if record is None else record.state,
        being_written=being_written,
        recorded_sha256=None if record is None else record.content_sha256,
        recorded_size=None if record is None else record.size_bytes,
        snapshot=snapshot,
        claim_digests=base.claim_digests,
        reference_count=base.reference_count,
        protected=base.protected,
    )


# ------------------------------------------------------------------- apply


def apply_cleanup_from_journal(
    session: SessionHandles,
    plan: ArtifactCleanupPlan,
    *,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> ArtifactCleanupReport:
    """Phase two (S6.2): delete the candidates still exactly as planned."""
    session.check_writable("apply GC")
    plan.check_session(session.session_id)
    projection = session_projection(session)

    def protecting(at: datetime) -> ArtifactClaims:
        return ArtifactClaims.from_leases(projection.live_leases().values(), at)

    if session.artifacts is not None:
        at = now or session.clock.now()
        return apply_objects(session, plan, at, protecting, progress)
    return _Applier(session, plan, now, protecting, progress).run()


def apply_cleanup_with_claims(
    session: SessionHandles,
    plan: ArtifactCleanupPlan,
    claims: list[ArtifactRetentionClaim],
    *,
    now: datetime | None = None,
) -> ArtifactCleanupReport:
    """Apply with raw claims (the seed's way); refused once a lease exists (S6.4)."""
    session.check_writable("apply GC")
    plan.check_session(session.session_id)
    _refuse_raw_claims(session)
    for claim in claims:
        claim.check_session(session.session_id)

    def protecting(at: datetime) -> ArtifactClaims:
        return ArtifactClaims.from_claims(iter([(c, c.is_active(at)) for c in claims]))

    if session.artifacts is not None:
        return apply_objects(session, plan, now or session.clock.now(), protecting)
    return _Applier(session, plan, now, protecting, None).run()


BATCH_CANDIDATES = 32
"""Candidates applied per hold of the session lock (S6.2): one commit records
their intents, one their outcomes, and five directory fsyncs cover their moves."""
BATCH_BYTES = 32 << 20
"""Planned bytes a batch re-hashes at most (a bigger file is a batch alone); with
`BATCH_CANDIDATES` it bounds how long a publication waits for the lock."""


class _Applier:
    def __init__(
        self,
        session: SessionHandles,
        plan: ArtifactCleanupPlan,
        now: datetime | None,
        protecting: Callable[[datetime], ArtifactClaims],
        progress: Progress | None,
    ) -> None:
        self.session = session
        self.plan = plan
        self.now = now
        self.protecting = protecting
        self.progress = progress

    def run(self) -> ArtifactCleanupReport:
        applied_at = self.at()
        if self.plan.dry_run:
            return cleanup_report(self.plan, (), applied_at=applied_at)
        candidates = self.plan.candidates()
        outcomes: list[ArtifactCleanupDecision] = []
        error: str | None = None
        done = 0
        with (
            _ToolResults(self.session) as results,
            _Quarantine(self.session) as quarantine,
        ):
            for batch in _batches(candidates):
                applying = _Batch(self, results.fd, quarantine.fd, batch)
                try:
                    with self.session.lock:
                        applying.apply()
                except _Failure as failure:
                    applying.stop(failure.filename, failure.error)
                except OSError as failure:  # taking the lock
                    applying.stop(batch[0].filename, failure)
                outcomes += applying.outcomes.values()
                if applying.error is not None:
                    error = applying.error
                    break
                done += len(batch)
                if self.progress is not None:
                    self.progress(done, len(candidates))
        return cleanup_report(self.plan, outcomes, applied_at=applied_at, error=error)

    def at(self) -> datetime:
        return self.now or self.session.clock.now()


@dataclass
class _Member:
    """A candidate admitted to its batch's intent, and what became of it."""

    planned: ArtifactCleanupDecision
    snapshot: FileSnapshot
    artifact: Artifact
    count: int
    outcome: ApplyOutcome | None = None

    @property
    def filename(self) -> str:
        """The candidate's filename."""
        return self.planned.filename


class _Batch:
    """One batch of candidates, applied under one hold of the session lock."""

    def __init__(
        self,
        applier: _Applier,
        results_fd: int,
        quarantine_fd: int,
        batch: list[ArtifactCleanupDecision],
    ) -> None:
        self.applier = applier
        self.session = applier.session
        self.fs: FileSystem = applier.session.fs
        self.results_fd = results_fd
        self.quarantine_fd = quarantine_fd
        self.batch = batch
        self.outcomes: dict[str, ArtifactCleanupDecision] = {}
        self.error: str | None = None

    def apply(self) -> None:
        """Fold the claims once, admit each candidate, delete the admitted."""
        claims = self.applier.protecting(self.applier.at())
        members: list[_Member] = []
        for planned in self.batch:
            count = claims.counts.get(planned.filename, 0)
            try:
                admitted = self.admit(planned, claims, count)
            except OSError as error:
                self.delete(members)  # those admitted before it, as planned
                raise _Failure(planned.filename, error) from error
            if isinstance(admitted, ApplyOutcome):
                self.decide(planned, admitted, count)
            else:
                members.append(admitted)
        self.delete(members)

    def stop(self, filename: str, failure: OSError) -> None:
        """End the run on `failure`; a refused move or unlink denies its candidate."""
        self.error = f"{filename}: {failure}"
        if isinstance(failure, PermissionError) and filename not in self.outcomes:
            # Put back or left as it was; what the system refused here it
            # refuses the next candidate too.
            planned = next(c for c in self.batch if c.filename == filename)
            self.decide(planned, ApplyOutcome.DELETE_DENIED, planned.reference_count)

    def decide(
        self, planned: ArtifactCleanupDecision, outcome: ApplyOutcome, count: int
    ) -> None:
        self.outcomes[planned.filename] = outcome.decide(planned, count)

    def admit(
        self, planned: ArtifactCleanupDecision, claims: ArtifactClaims, count: int
    ) -> _Member | ApplyOutcome:
        """Check one candidate again under the lock: admitted, or its outcome."""
        name, snapshot = planned.filename, planned.snapshot
        if artifact_number(name) is None:  # a plan edited by hand, say
            return ApplyOutcome.NAME_NOT_OWNED
        if claims.protects(name) and self.session.safeguards.reverify_claims_at_apply:
            return ApplyOutcome.CLAIM_ADDED
        artifact = self.session.store.get_artifact(name)
        if (
            snapshot is None
            or artifact is None
            or not ARTIFACT_MACHINE.allows(artifact.state, "quarantine")
        ):
            return ApplyOutcome.STATE_CHANGED
        try:
            info = self.fs.lstat(name, dir_fd=self.results_fd)
        except FileNotFoundError:
            artifact.mark_lost(detected_at=self.applier.at())
            self.session.store.save_aggregates(artifact)
            return ApplyOutcome.ALREADY_GONE
        if not _same_entry(info, snapshot, regular=True):
            return ApplyOutcome.FILE_CHANGED
        return _Member(planned, snapshot, artifact, count)

    def delete(self, members: list[_Member]) -> None:
        """Record one intent for `members`, move, check, then unlink or put back."""
        if not members:
            return
        intent = uuid.uuid4().hex
        at = self.applier.at()
        for member in members:
            member.artifact.quarantine(intent, quarantined_at=at)
        self.session.store.save_aggregates(*(m.artifact for m in members))
        first = members[0].filename
        try:
            with _blaming(first):
                self.fs.mkdir(intent, 0o700, dir_fd=self.quarantine_fd)
                self.fs.fsync(self.quarantine_fd)
                intent_fd = self.fs.open(intent, DIR_FLAGS, dir_fd=self.quarantine_fd)
            try:
                self.move(members, intent_fd)
                self.check(members, intent_fd)
            finally:
                self.fs.close(intent_fd)
        except _Failure:
            # Settle the undecided now, as the next open would, so their
            # artifacts stay usable in this process; then stop the run.
            self.settle(members)
            self.record(members)
            raise
        self.record(members)
        with _blaming(first):  # recorded: reported, then the run stops
            _remove_intent_dir(self.fs, self.quarantine_fd, intent)

    def move(self, members: list[_Member], intent_fd: int) -> None:
        for member in members:
            with _blaming(member.filename):
                self.fs.rename(
                    member.filename,
                    member.filename,
                    src_dir_fd=self.results_fd,
                    dst_dir_fd=intent_fd,
                )
        with _blaming(members[0].filename):
            self.fs.fsync(intent_fd)
            self.fs.fsync(self.results_fd)

    def check(self, members: list[_Member], intent_fd: int) -> None:
        """Unlink each member still exactly as planned; put the others back."""
        for member in members:
            with _blaming(member.filename):
                if self.verified(intent_fd, member.filename, member.snapshot):
                    self.fs.unlink(member.filename, dir_fd=intent_fd)
                    member.outcome = ApplyOutcome.DELETED
                elif _put_back(self.fs, intent_fd, self.results_fd, member.filename):
                    member.outcome = ApplyOutcome.PUT_BACK
                else:
                    member.outcome = ApplyOutcome.LEFT_IN_QUARANTINE
        deleted = [m for m in members if m.outcome is ApplyOutcome.DELETED]
        if deleted:
            with _blaming(deleted[0].filename):
                self.fs.fsync(intent_fd)

    def verified(self, dir_fd: int, name: str, snapshot: FileSnapshot) -> bool:
        opened = _open_artifact(self.fs, dir_fd, name)
        if opened is None:
            return False
        fd, info = opened
        try:
            if not _same_entry(info, snapshot, regular=True) or info.st_nlink != 1:
                return False
            digest, _ = digest_open_file(self.fs, fd)
        finally:
            self.fs.close(fd)
        return digest == snapshot.content_sha256

    def settle(self, members: list[_Member]) -> None:
        for member in members:
            if member.outcome is None:
                with suppress(OSError, ArtifactLeaseJournalError):
                    _settle(
                        self.session,
                        self.quarantine_fd,
                        self.results_fd,
                        member.filename,
                    )

    def record(self, members: list[_Member]) -> None:
        """Record the deletions and put-backs decided, in one commit."""
        at = self.applier.at()
        changed = []
        for member in members:
            if member.outcome is ApplyOutcome.DELETED:
                member.artifact.delete(deleted_at=at)
                changed.append(member.artifact)
            elif member.outcome is ApplyOutcome.PUT_BACK:
                member.artifact.restore(restored_at=at)
                changed.append(member.artifact)
        if changed:
            self.session.store.save_aggregates(*changed)
        for member in members:
            if member.outcome is not None:
                self.decide(member.planned, member.outcome, member.count)


class _Failure(Exception):
    """An OSError that stopped a batch, and the candidate it is reported on."""

    def __init__(self, filename: str, error: OSError) -> None:
        super().__init__(filename)
        self.filename = filename
        self.error = error


@contextmanager
def _blaming(filename: str) -> Iterator[None]:
    """Turn an OSError inside into a `_Failure` reported on `filename`."""
    try:
        yield
    except OSError as error:
        raise _Failure(filename, error) from error


def _batches(
    candidates: tuple[ArtifactCleanupDecision, ...],
) -> Iterator[list[ArtifactCleanupDecision]]:
    """Split the candidates, in order, into batches within both bounds.

    A name seen twice (a plan edited by hand) starts a new batch: one commit
    cannot record two intents for one artifact.
    """
    batch: list[ArtifactCleanupDecision] = []
    names: set[str] = set()
    size = 0
    for candidate in candidates:
        planned = 0 if candidate.snapshot is None else candidate.snapshot.size_bytes
        if batch and (
            len(batch) == BATCH_CANDIDATES
            or size + planned > BATCH_BYTES
            or candidate.filename in names
        ):
            yield batch
            batch, names, size = [], set(), 0
        batch.append(candidate)
        names.add(candidate.filename)
        size += planned
    if batch:
        yield batch


# -------------------------------------------------------------- recovery


def resolve_quarantine(session: SessionHandles, results_fd: int) -> list[str]:
    """Finish what a crashed apply left, from its intents (S2.6); return the names.

    A file still in its intent directory goes back (the next plan decides
    again); a file already unlinked gets its deletion recorded; a file back in
    place gets its restoration recorded. Nothing a lease protects is lost: a
    file is only ever unlinked after the checks under the session lock.
    """
    resolved: list[str] = []
    with _Quarantine(session) as quarantine:
        records = session_projection(session).artifact_records()
        for name, record in records.items():
            if record.state is not ArtifactState.QUARANTINED:
                continue
            artifact = session.store.get_artifact(name)
            if artifact is None:  # pragma: no cover - the view saw its creation
                continue
            intent = str(getattr(artifact, "quarantine_intent", "") or "")
            _resolve_one(session, quarantine.fd, results_fd, artifact, intent)
            resolved.append(name)
        _remove_empty_intents(session.fs, quarantine.fd)
    return resolved


def _settle(
    session: SessionHandles, quarantine_fd: int, results_fd: int, name: str
) -> None:
    """Resolve `name`'s quarantine intent if it has one, from the recorded state."""
    artifact = session.store.get_artifact(name)
    if (
        artifact is not None and artifact.artifact_state is ArtifactState.QUARANTINED
    ):  # pragma: no branch - settled only before a decision, while still quarantined
        intent = str(getattr(artifact, "quarantine_intent", "") or "")
        _resolve_one(session, quarantine_fd, results_fd, artifact, intent)


def _resolve_one(
    session: SessionHandles,
    quarantine_fd: int,
    results_fd: int,
    artifact: Artifact,
    intent: str,
) -> None:
    fs, name, at = session.fs, artifact.filename, session.clock.now()
    try:
        intent_fd = fs.open(intent, DIR_FLAGS, dir_fd=quarantine_fd) if intent else None
    except FileNotFoundError:
        intent_fd = None
    try:
        held = intent_fd is not None and _exists(fs, name, intent_fd)
        if (
            held
            and intent_fd is not None
            and _put_back(fs, intent_fd, results_fd, name)
        ):
            artifact.restore(restored_at=at)
        elif held:
            return  # the name is taken by another file: stay quarantined
        elif _exists(fs, name, results_fd):
            artifact.restore(restored_at=at)  # crashed before or after the move
        else:
            artifact.delete(deleted_at=at)  # crashed after the verified unlink
    finally:
        if intent_fd is not None:
            fs.close(intent_fd)
    session.store.save_aggregates(artifact)


# ---------------------------------------------------------------- helpers


class _ToolResults:
    def __init__(self, session: SessionHandles) -> None:
        self.session = session
        self.fd = -1

    def __enter__(self) -> Self:
        self.fd = open_private_dir(
            self.session.fs, TOOL_RESULTS_DIR, dir_fd=self.session.dir_fd,
            what="tool-results directory",
        )  # fmt: skip
        return self

    def __exit__(self, *_: object) -> None:
        self.session.fs.close(self.fd)


class _Quarantine(_ToolResults):
    def __enter__(self) -> Self:
        self.fd = open_private_dir(
            self.session.fs, QUARANTINE_DIR, dir_fd=self.session.dir_fd,
            what="quarantine directory",
        )  # fmt: skip
        return self


def _kind(mode: int) -> EntryKind:
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return EntryKind.DEVICE


def _open_artifact(
    fs: FileSystem, dir_fd: int, name: str
) -> tuple[int, StatResult] | None:
    """Open per A4 (never blocking on a FIFO); None unless a private regular file."""
    try:
        fd = fs.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in {errno.ELOOP, errno.ENOENT, errno.EACCES, errno.ENXIO}:
            return None
        raise
    try:
        check_private(fs, fd, name, directory=False)
        info = fs.fstat(fd)
    except ArtifactAccessError:
        fs.close(fd)
        return None
    except BaseException:
        fs.close(fd)
        raise
    return fd, info


def _try_flock(fs: FileSystem, fd: int) -> bool:
    try:
        fs.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fs.flock(fd, fcntl.LOCK_UN)
    return True


def _snapshot(info: StatResult, digest: str, size: int) -> FileSnapshot:
    return FileSnapshot(
        size_bytes=size,
        mtime_ns=info.st_mtime_ns,
        st_dev=info.st_dev,
        st_ino=info.st_ino,
        content_sha256=digest,
    )


def _same_entry(info: StatResult, snapshot: FileSnapshot, *, regular: bool) -> bool:
    return (
        (not regular or stat.S_ISREG(info.st_mode))
        and (info.st_dev, info.st_ino) == (snapshot.st_dev, snapshot.st_ino)
        and (info.st_size, info.st_mtime_ns) == (snapshot.size_bytes, snapshot.mtime_ns)
    )


def _put_back(fs: FileSystem, intent_fd: int, results_fd: int, name: str) -> bool:
    """Move a regular file back with link + unlink; False if it must stay (S6.2)."""
    try:
        info = fs.lstat(name, dir_fd=intent_fd)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    try:
        fs.link(name, name, src_dir_fd=intent_fd, dst_dir_fd=results_fd)
    except FileExistsError:
        # Linked back before a crash, not yet unlinked: the same inode.
        placed = fs.lstat(name, dir_fd=results_fd)
        if (placed.st_dev, placed.st_ino) != (info.st_dev, info.st_ino):
            return False
    fs.fsync(results_fd)
    fs.unlink(name, dir_fd=intent_fd)
    fs.fsync(intent_fd)
    return True


def _exists(fs: FileSystem, name: str, dir_fd: int) -> bool:
    try:
        fs.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _remove_intent_dir(fs: FileSystem, quarantine_fd: int, intent: str) -> None:
    try:
        fs.rmdir(intent, dir_fd=quarantine_fd)
    except OSError as error:
        if error.errno not in {
            errno.ENOTEMPTY,
            errno.EEXIST,
            errno.ENOENT,
            errno.ENOTDIR,  # not an intent of ours: left alone
        }:
            raise
        return
    fs.fsync(quarantine_fd)


def _remove_empty_intents(fs: FileSystem, quarantine_fd: int) -> None:
    for intent in fs.listdir(quarantine_fd):
        _remove_intent_dir(fs, quarantine_fd, intent)


__all__ = [
    "apply_cleanup_from_journal",
    "apply_cleanup_with_claims",
    "plan_cleanup_from_claims",
    "plan_cleanup_from_journal",
    "resolve_quarantine",
]
