"""The I/O-error sweep (issue 6 item 6, reliability note T4): templates, cases, oracle.

Every public operation runs from a prepared starting state (a *template*: a
closed session directory built once without faults). A case copies the
template, opens the copy through `CrashFS`, does the operation's unfaulted
preparation, arms one fault at `fs.count + k` (the operation's k-th step,
1-based; for `open` the k-th step of `open_session` itself), runs the
operation, and judges it:

- the call returns normally, or raises what SPEC allows for it: an `OSError`
  carrying the injected errno, or (for operations that append to the lease
  journal) `ArtifactLeaseJournalError` whose cause chain holds that `OSError`
  (J4's poisoned writer). A short write must never fail anything: writes loop.
- J4: when the journal writer failed, the same process refuses any further
  append (probed with a `prepare`, faults disarmed) and touches the journal no
  more.
- S4.5 / S5.3 in the same process: an owner holding the reference means the
  PREPARED record was already appended; a lease ABORTED in the store means the
  owner tombstoned the id first.

Then the session is closed and reopened with the plain seam, and nothing may
be half-applied: the journal verifies whole; every lease has one phase, the
same in store and journal (catch-up on reopen may append what the store
already held, S4.5), and that phase is the old or the new one (the new one if
the call returned); every recorded sealed, partial or orphan artifact is
present, private, singly linked and digest-exact; a deleted one is gone; no
`.tmp-*` file, no quarantined file or intent is left; every live lease's
artifact is intact (I1); a spill that returned stored exactly its text, one
that raised recorded nothing; GC deleted only planned orphans; a torn journal
tail is kept aside, never lost.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shutil
import stat
import traceback
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.services.externalizer import (
    ExternalizedToolResult,
    GateOutcome,
)
from spillvault.adapters.session import Session, open_session
from spillvault.domain.cleanup import ArtifactCleanupPlan, ArtifactCleanupReport
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import (
    ArtifactCleanupStatus,
    ArtifactLeasePhase,
    ArtifactReconciliationStatus,
    ArtifactState,
)
from spillvault.domain.errors import (
    ArtifactLeaseJournalError,
    ArtifactSessionReadOnlyError,
)
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactLeaseTransaction,
    ArtifactReference,
    ArtifactRetentionClaim,
)

from .crashfs import CrashFS
from .dates import fixed
from .fakes import FakeClock
from .leases import claim_for
from support.locks import drop_locks

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

Fault = int | Literal["short"]
Phase = ArtifactLeasePhase
Status = ArtifactCleanupStatus

ERRNOS: tuple[int, ...] = (
    errno.EIO,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
)
FAULTS: tuple[Fault, ...] = (*ERRNOS, "short")
SESSION = "session-io"
"""Every template's session directory name (the session id; copies keep it)."""
TTL = 3600.0
OLD = timedelta(days=2)
SMALL_TEXT = "".join(f"line {i:05d}: bash output, ok\n" for i in range(1500))
"""Over bash's 30,000-char limit: one chunk, one write."""
BIG_TEXT = "".join(f"line {i:06d}: bash output, still ok\n" for i in range(80_000))
"""Over 2 MiB: three 1 MiB chunk writes."""
TORN_TAIL = b'{"at":"2026-01-01T00:00:00+00:00","claim":{"torn append, never acked'
"""An append cut short by a crash: no newline (J5, J6); no record holds it."""
PROBE_TX = "tx-j4-probe"
NEW_TX = "tx-new"

assert len(SMALL_TEXT) > 30_000
assert len(BIG_TEXT) >= 2 * 1024 * 1024


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fault_name(fault: Fault) -> str:
    return fault if isinstance(fault, str) else errno.errorcode[fault]


# ---------------------------------------------------------------- templates


@dataclass
class Template:
    """A closed session directory every case of some operations starts from."""

    name: str
    path: Path
    now: datetime
    """The FakeClock's time in every case."""
    artifacts: dict[str, str] = field(default_factory=dict)
    """Recorded (sealed) artifacts: filename -> SHA-256."""
    eventless: dict[str, bytes] = field(default_factory=dict)
    """Artifact-named files with no event (GC adopts them): filename -> bytes."""
    leases: dict[str, Phase] = field(default_factory=dict)
    """Transaction id -> phase in both store and journal (after catch-up)."""
    roles: dict[str, str] = field(default_factory=dict)
    """Role ("leased", "orphan", ...) -> filename or transaction id."""
    torn_offset: int | None = None
    """Where a torn journal tail starts (the recovery template)."""


def _stored(session: Session, text: str) -> ArtifactReference:
    return session.externalizer.externalize(text, "bash").artifact


def _claim(reference: ArtifactReference) -> ArtifactRetentionClaim:
    return ArtifactRetentionClaim.from_memory_reference(reference.for_memory())


def _artifact_text(tag: str) -> str:
    return f"{tag}: a long tool output line\n" * 5000


def _record(tpl: Template, role: str, reference: ArtifactReference) -> str:
    name = os.path.basename(reference.path)
    tpl.artifacts[name] = reference.content_sha256
    tpl.roles[role] = name
    return name


def _set_mtime(path: Path, when: datetime) -> None:
    stamp = int(when.timestamp() * 1e9)
    os.utime(path, ns=(stamp, stamp))


def build_fresh(base: Path) -> Template:
    """A created session with nothing in it (spills)."""
    tpl = Template("fresh", base / "fresh" / SESSION, fixed(2026))
    tpl.path.parent.mkdir(parents=True)
    open_session(tpl.path, clock=FakeClock(tpl.now)).close()
    return tpl


def build_artifact(base: Path) -> Template:
    """One stored artifact, no lease and no journal yet (prepare creates it)."""
    tpl = Template("artifact", base / "artifact" / SESSION, fixed(2026))
    tpl.path.parent.mkdir(parents=True)
    with open_session(tpl.path, clock=FakeClock(tpl.now)) as session:
        _record(tpl, "leased", _stored(session, _artifact_text("a")))
    return tpl


def build_leases(base: Path) -> Template:
    """Artifact A with a COMMITTED lease, artifact B with a PREPARED one."""
    tpl = Template("leases", base / "leases" / SESSION, fixed(2026))
    tpl.path.parent.mkdir(parents=True)
    with open_session(tpl.path, clock=FakeClock(tpl.now)) as session:
        a = _stored(session, _artifact_text("a"))
        b = _stored(session, _artifact_text("b"))
        _record(tpl, "leased", a)
        _record(tpl, "pending_artifact", b)
        journal = session.journal
        journal.publish_reference(_claim(a), lambda: None, transaction_id="tx-c")
        journal.prepare(_claim(b), transaction_id="tx-p")
    tpl.leases = {"tx-c": Phase.COMMITTED, "tx-p": Phase.PREPARED}
    tpl.roles |= {"committed": "tx-c", "prepared": "tx-p"}
    return tpl


def build_gc(base: Path) -> Template:
    """An old orphan, an old eventless file, a leased and a recent artifact."""
    now = datetime.now(UTC)  # artifacts get real mtimes
    tpl = Template("gc", base / "gc" / SESSION, now)
    tpl.path.parent.mkdir(parents=True)
    results = tpl.path / "tool-results"
    with open_session(tpl.path, clock=FakeClock(now)) as session:
        orphan = _record(tpl, "orphan", _stored(session, _artifact_text("orphan")))
        leased_ref = _stored(session, _artifact_text("leased"))
        _record(tpl, "leased", leased_ref)
        _record(tpl, "recent", _stored(session, _artifact_text("recent")))
        session.journal.publish_reference(
            _claim(leased_ref), lambda: None, transaction_id="tx-g"
        )
        leased = tpl.roles["leased"]
    tpl.leases = {"tx-g": Phase.COMMITTED}
    eventless = "tool_result_050.txt"
    data = _artifact_text("eventless").encode()
    (results / eventless).write_bytes(data)
    (results / eventless).chmod(0o600)
    tpl.eventless[eventless] = data
    tpl.roles["eventless"] = eventless
    for name in (orphan, leased, eventless):
        _set_mtime(results / name, now - OLD)
    return tpl


def build_recovery(base: Path) -> Template:
    """A session a crash left needing recovery.

    A stale `.tmp-*` file in tool-results; artifact Q quarantined under an
    intent (moved into `.quarantine/<intent>/`); a lease event the store
    holds but the journal missed (tx-r2 PREPARED), with a torn append after
    the journal's last complete line.
    """
    tpl = Template("recovery", base / "recovery" / SESSION, fixed(2026))
    tpl.path.parent.mkdir(parents=True)
    clock = FakeClock(tpl.now)
    with open_session(tpl.path, clock=clock) as session:
        q = _stored(session, _artifact_text("quarantined"))
        s = _stored(session, _artifact_text("leased"))
        quarantined = _record(tpl, "quarantined", q)
        _record(tpl, "leased", s)
        session.journal.publish_reference(
            _claim(s), lambda: None, transaction_id="tx-r1"
        )
    intent = uuid.uuid4().hex
    with open_session(tpl.path, clock=clock) as session:
        artifact = session.store.get_artifact(quarantined)
        assert artifact is not None
        artifact.quarantine(intent, quarantined_at=clock.now())
        session.store.save_aggregates(artifact)
        # Recorded in the store only, as when a crash hits before the append.
        session.store.prepare_lease(
            ArtifactLeaseTransaction("tx-r2", _claim(s), clock.now())
        )
    (tpl.path / ".quarantine" / intent).mkdir(mode=0o700)
    os.rename(
        tpl.path / "tool-results" / quarantined,
        tpl.path / ".quarantine" / intent / quarantined,
    )
    tmp = tpl.path / "tool-results" / ".tmp-0123456789abcdef"
    tmp.write_bytes(b"half of an output a crash interrupted\n" * 100)
    tmp.chmod(0o600)
    journal_path = tpl.path / RETENTION_JOURNAL_NAME
    tpl.torn_offset = journal_path.stat().st_size
    with journal_path.open("ab") as handle:
        handle.write(TORN_TAIL)
    tpl.leases = {"tx-r1": Phase.COMMITTED, "tx-r2": Phase.PREPARED}
    tpl.roles |= {"intent": intent}
    return tpl


def build_none(base: Path) -> Template:
    """No session yet: only its parent directory (creation, S4.4)."""
    tpl = Template("none", base / "none" / SESSION, fixed(2026))
    tpl.path.parent.mkdir(parents=True)
    return tpl


BUILDERS: dict[str, Callable[[Path], Template]] = {
    "none": build_none,
    "fresh": build_fresh,
    "artifact": build_artifact,
    "leases": build_leases,
    "gc": build_gc,
    "recovery": build_recovery,
}


def copy_template(tpl: Template, dest_root: Path) -> Path:
    """Copy the closed template session (modes and mtimes kept) under dest_root."""
    dest_root.mkdir(parents=True)
    path = dest_root / SESSION
    if tpl.path.exists():
        shutil.copytree(tpl.path, path, symlinks=True)
    return path


# ---------------------------------------------------------------- operations


@dataclass
class Run:
    """One case's live objects: shared by an operation's hooks."""

    tpl: Template
    path: Path
    clock: FakeClock
    fs: CrashFS
    owner: InMemoryOwner = field(default_factory=InMemoryOwner)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What the faulted call did: its value, or its error (traceback as text)."""

    value: object = None
    error_type: type[BaseException] | None = None
    error_text: str = ""
    cause_errnos: tuple[int | None, ...] = ()
    fired: tuple[int, ...] = ()
    """Indexes (in `fs.steps`) of the steps the injected errno failed."""

    @property
    def returned(self) -> bool:
        return self.error_type is None

    @classmethod
    def of_error(cls, error: BaseException) -> Outcome:
        chain: list[int | None] = []
        seen: BaseException | None = error
        while seen is not None and len(chain) < 10:
            if isinstance(seen, OSError):
                chain.append(seen.errno)
            seen = seen.__cause__ or seen.__context__
        text = "".join(traceback.format_exception(error))
        return cls(error_type=type(error), error_text=text, cause_errnos=tuple(chain))


class Operation:
    """A public operation under test; subclasses fill in the hooks."""

    name = ""
    template = ""
    journal_errors = True
    """Whether `ArtifactLeaseJournalError` (a poisoned journal writer) may surface."""
    opens = False
    """Whether the faulted call is `open_session` itself."""
    tx: str | None = None
    """The transaction the operation moves (checked in store and journal)."""
    phases_after: frozenset[Phase | None] = frozenset()
    """The phases `tx` may have after reopening (None: no such lease)."""
    phase_if_returned: Phase | None = None

    def prepare(self, session: Session, run: Run) -> None:
        """Unfaulted setup in the case's session (before arming)."""
        session.externalizer  # noqa: B018 - built before the fault is armed
        session.journal  # noqa: B018

    def call(self, session: Session, run: Run) -> object:
        """The operation itself (faulted)."""
        raise NotImplementedError

    def check_live(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        """Checks in the faulted process, after the call, before closing."""

    def check_after(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        """Checks after reopening with the plain seam."""

    def surfaced(self, outcome: Outcome) -> bool:
        """Whether the call told its caller that an I/O error happened."""
        return not outcome.returned

    def may_swallow(self, run: Run, outcome: Outcome) -> bool:
        """Whether every failed step is one this operation may shrug off."""
        return False

    def probe_claim(self, session: Session, run: Run) -> ArtifactRetentionClaim:
        """A valid claim on a present artifact, for the J4 probe."""
        return claim_on(session, run.tpl.roles["leased"])


def reference_of(session: Session, filename: str) -> ArtifactReference:
    artifact = session.store.get_artifact(filename)
    assert artifact is not None, filename
    return session.externalizer.store.reference_for(artifact)


def claim_on(session: Session, filename: str) -> ArtifactRetentionClaim:
    return _claim(reference_of(session, filename))


def lease_phase(session: Session, tx: str) -> Phase | None:
    lease = session.store.find_lease(tx)
    return None if lease is None else lease.phase


class Spill(Operation):
    """`externalize` (always stores, raises on failure)."""

    template = "fresh"
    journal_errors = False

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text

    def call(self, session: Session, run: Run) -> object:
        return session.externalizer.externalize(self.text, "bash")

    def stored_name(self, outcome: Outcome) -> str | None:
        if isinstance(outcome.value, ExternalizedToolResult):
            return os.path.basename(outcome.value.artifact.path)
        return None

    def may_keep_original(self, outcome: Outcome) -> bool:
        """Whether a normal return may have stored nothing (the gate's rule 5)."""
        return False

    def may_swallow(self, run: Run, outcome: Outcome) -> bool:
        """Only the cleanup after the artifact is recorded (A3: unlink tmp, fsync).

        `LocalArtifactStore.store` logs it; the next recovery pass removes the tmp.
        """
        if self.stored_name(outcome) is None:
            return False
        steps = run.fs.steps
        linked = [
            i for i, st in enumerate(steps) if st.op == "link" and st.outcome == "ok"
        ]
        return bool(linked) and all(
            i > linked[-1] and steps[i].op in {"unlink", "fsync"} for i in outcome.fired
        )

    def check_live(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        if self.stored_name(outcome) is None:
            # Linked after its fsync, then the failed call could not unlink it:
            # a complete copy with no event, which GC adopts (S6.1).
            run.data["complete_copy_ok"] = self.text.encode()

    def check_after(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        data = self.text.encode()
        recorded = {a.filename: a for a in session.externalizer.artifacts()}
        name = self.stored_name(outcome)
        if outcome.returned and name is None and not self.may_keep_original(outcome):
            problems.append(f"{self.name} returned {outcome.value!r:.200}, no artifact")
        if name is None:
            if recorded:
                problems.append(
                    f"{self.name} failed but recorded artifacts {sorted(recorded)}"
                )
            return
        artifact = recorded.get(name)
        if artifact is None or artifact.state != ArtifactState.SEALED.value:
            problems.append(f"reported artifact {name} is not recorded sealed")
            return
        path = run.path / "tool-results" / name
        if not path.is_file() or path.read_bytes() != data:
            problems.append(f"reported artifact {name} does not hold the text")
        content = artifact.stored_content
        if content is None or content.content_sha256 != sha256(data):
            problems.append(f"reported artifact {name} has the wrong digest")
        if set(recorded) != {name}:
            problems.append(f"spill recorded {sorted(recorded)}, not just {name}")


class SpillGate(Spill):
    """`process` (the gate): never raises; spilled or store_failed (S1.2.5)."""

    journal_errors = False

    def call(self, session: Session, run: Run) -> object:
        return session.externalizer.process(self.text, "bash")

    def stored_name(self, outcome: Outcome) -> str | None:
        value = outcome.value
        if isinstance(value, GateOutcome) and value.artifact is not None:
            return os.path.basename(value.artifact.path)
        return None

    def may_keep_original(self, outcome: Outcome) -> bool:
        value = outcome.value
        return isinstance(value, GateOutcome) and value.reason == "store_failed"

    def surfaced(self, outcome: Outcome) -> bool:
        return self.may_keep_original(outcome)

    def check_live(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        super().check_live(session, run, outcome, problems)
        value = outcome.value
        if not outcome.returned:
            problems.append("process() raised: the gate must never raise (S1.2.5)")
            return
        if not isinstance(value, GateOutcome):
            problems.append(f"process() returned {value!r}")
            return
        if value.reason == "store_failed":
            if value.content != self.text or value.artifact is not None:
                problems.append("store_failed must return the original untouched")
        elif value.reason != "spilled" or value.artifact is None:
            problems.append(f"process() gave reason {value.reason!r}")


class Prepare(Operation):
    name = "prepare"
    template = "artifact"
    tx = NEW_TX
    phases_after = frozenset({None, Phase.PREPARED})
    phase_if_returned = Phase.PREPARED

    def call(self, session: Session, run: Run) -> object:
        claim = claim_on(session, run.tpl.roles["leased"])
        return session.journal.prepare(claim, transaction_id=NEW_TX)


class Publish(Operation):
    name = "publish_reference"
    template = "leases"
    tx = NEW_TX
    phases_after = frozenset({None, Phase.PREPARED, Phase.COMMITTED})
    phase_if_returned = Phase.COMMITTED

    def call(self, session: Session, run: Run) -> object:
        reference = reference_of(session, run.tpl.roles["leased"])
        publisher = run.owner.publisher(reference.for_memory(), NEW_TX)
        return session.journal.publish_reference(
            _claim(reference), publisher, transaction_id=NEW_TX
        )

    def check_live(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        # S4.5: the journal holds PREPARED before the owner is called.
        if owner_presence(run.owner, NEW_TX) == "published" and (
            Phase.PREPARED not in journal_phases(run.path).get(NEW_TX, [])
        ):
            problems.append("owner holds tx-new but the journal has no PREPARED")

    def check_after(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        phase = lease_phase(session, NEW_TX)
        held = owner_presence(run.owner, NEW_TX) == "published"
        if held and phase is None:
            problems.append("owner holds tx-new with no lease recorded")
        if phase is Phase.COMMITTED and not held:
            problems.append("tx-new COMMITTED but the owner does not hold it")


class Commit(Operation):
    name = "commit"
    template = "leases"
    tx = "tx-p"
    phases_after = frozenset({Phase.PREPARED, Phase.COMMITTED})
    phase_if_returned = Phase.COMMITTED

    def call(self, session: Session, run: Run) -> object:
        return session.journal.commit("tx-p")


class Remove(Operation):
    name = "remove_reference"
    template = "leases"
    tx = "tx-c"
    phases_after = frozenset({Phase.COMMITTED, Phase.RELEASED})
    phase_if_returned = Phase.RELEASED

    def prepare(self, session: Session, run: Run) -> None:
        super().prepare(session, run)
        reference = reference_of(session, run.tpl.roles["leased"])
        run.owner.publish("tx-c", reference.for_memory())

    def call(self, session: Session, run: Run) -> object:
        return session.journal.remove_reference("tx-c", run.owner.remover("tx-c"))

    def check_after(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        if (
            lease_phase(session, "tx-c") is Phase.RELEASED
            and owner_presence(run.owner, "tx-c") == "published"
        ):
            problems.append("tx-c RELEASED while the owner still holds it (S4.9)")


class Reconcile(Operation):
    name = "reconcile_pending"
    template = "leases"
    tx = "tx-p"
    phases_after = frozenset({Phase.PREPARED, Phase.ABORTED})
    phase_if_returned = Phase.ABORTED

    def call(self, session: Session, run: Run) -> object:
        return session.journal.reconcile_pending(run.owner)

    def check_live(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        if outcome.returned:
            reports = outcome.value
            assert isinstance(reports, list)
            statuses = [(r.transaction_id, r.status, r.reason) for r in reports]
            expected = [
                ("tx-p", ArtifactReconciliationStatus.ABORTED, "owner_sealed_absence")
            ]
            if statuses != expected:
                problems.append(
                    f"reconcile_pending reported {statuses}, expected {expected}: "
                    "no other reconciler ran"
                )

    def check_after(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        if (
            lease_phase(session, "tx-p") is Phase.ABORTED
            and owner_presence(run.owner, "tx-p") != "sealed"
        ):
            problems.append("tx-p ABORTED but the owner never sealed it (S5.3)")


def deleting() -> ArtifactCleanupPolicy:
    return ArtifactCleanupPolicy(orphan_ttl_seconds=TTL, dry_run=False)


class GcPlan(Operation):
    name = "gc_plan"
    template = "gc"

    def call(self, session: Session, run: Run) -> object:
        return session.externalizer.plan_cleanup_from_journal(
            session.journal, policy=deleting(), now=run.clock.now()
        )

    def check_live(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        if outcome.returned:
            assert isinstance(outcome.value, ArtifactCleanupPlan)
            check_plan(run.tpl, outcome.value, problems)


def check_plan(tpl: Template, plan: ArtifactCleanupPlan, problems: list[str]) -> None:
    statuses = {d.filename: d.status for d in plan.decisions}
    want = {
        tpl.roles["orphan"]: Status.PLANNED_DELETE,
        tpl.roles["eventless"]: Status.PLANNED_DELETE,
        tpl.roles["leased"]: Status.RETAINED_REFERENCED,
        tpl.roles["recent"]: Status.RETAINED_RECENT,
    }
    if statuses != want:
        problems.append(f"plan decided {statuses}, expected {want}")


class GcApply(Operation):
    name = "gc_apply"
    template = "gc"

    def prepare(self, session: Session, run: Run) -> None:
        super().prepare(session, run)
        plan = session.externalizer.plan_cleanup_from_journal(
            session.journal, policy=deleting(), now=run.clock.now()
        )
        problems: list[str] = []
        check_plan(run.tpl, plan, problems)
        assert not problems, problems
        run.data["plan"] = plan

    def call(self, session: Session, run: Run) -> object:
        return session.externalizer.apply_cleanup_from_journal(
            run.data["plan"], session.journal, now=run.clock.now()
        )

    def surfaced(self, outcome: Outcome) -> bool:
        """S6.2: an I/O error stops the run and the report says so."""
        value = outcome.value
        return not outcome.returned or (
            isinstance(value, ArtifactCleanupReport) and value.error is not None
        )

    def check_live(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        if not outcome.returned:
            return
        report = outcome.value
        assert isinstance(report, ArtifactCleanupReport)
        # Nothing else touches the files: no race to detect, only deletions; an
        # injected EACCES may deny one, and stops the run (report.error).
        plan = run.data["plan"]
        candidates = {d.filename for d in plan.candidates()}
        reached = [d for d in report.decisions if d.filename in candidates]
        problems.extend(
            f"apply gave {decision.filename} {decision.status}: {decision.reason}"
            for decision in reached
            if decision.status is not Status.DELETED
            and not (
                report.error is not None and decision.reason == "artifact_delete_denied"
            )
            and decision.filename not in report.untouched
        )
        run.data["reported_deleted"] = {
            d.filename for d in report.decisions if d.status is Status.DELETED
        }
        if report.error is None and report.untouched:
            problems.append(f"apply without error left {report.untouched} untouched")

    def check_after(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        problems.extend(
            f"apply reported {name} deleted; it is present"
            for name in run.data.get("reported_deleted", ())
            if (run.path / "tool-results" / name).exists()
        )


class OpenRecovery(Operation):
    name = "open_session"
    template = "recovery"
    opens = True

    def check_after(
        self, session: Session, run: Run, outcome: Outcome, problems: list[str]
    ) -> None:
        tpl = run.tpl
        name = tpl.roles["quarantined"]
        artifact = session.store.get_artifact(name)
        if artifact is None or artifact.state != ArtifactState.SEALED.value:
            state = None if artifact is None else artifact.state
            problems.append(f"quarantined {name} not restored (state {state})")
        assert tpl.torn_offset is not None
        aside = run.path / f"{RETENTION_JOURNAL_NAME}.torn-{tpl.torn_offset}"
        if not aside.is_file() or aside.read_bytes() != TORN_TAIL:
            problems.append(f"the torn tail is not kept aside as {aside.name}")
        journal = (run.path / RETENTION_JOURNAL_NAME).read_bytes()
        if TORN_TAIL in journal or not journal.endswith(b"\n"):
            problems.append("the torn tail is still in the journal")


class CreateSession(Operation):
    """`open_session` creating a new session (S4.4)."""

    name = "create_session"
    template = "none"
    opens = True
    journal_errors = False


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        CreateSession(),
        Spill("spill", SMALL_TEXT),
        Spill("spill_big", BIG_TEXT),
        SpillGate("spill_gate", SMALL_TEXT),
        Prepare(),
        Publish(),
        Commit(),
        Remove(),
        Reconcile(),
        GcPlan(),
        GcApply(),
        OpenRecovery(),
    )
}


# ------------------------------------------------------------------- owner


def owner_presence(owner: InMemoryOwner, tx: str) -> str:
    """Return published, absent or sealed, as the owner holds `tx` now."""
    transaction = ArtifactLeaseTransaction(tx, claim_for(SESSION), datetime.now(UTC))
    with owner.inspect_fenced(transaction) as fence:
        observation = fence.observation
    if observation.absence_sealed:
        return "sealed"
    return observation.presence.value


# ------------------------------------------------------------------ journal


def journal_phases(path: Path) -> dict[str, list[Phase]]:
    """Return each transaction's phases in the journal's complete lines."""
    try:
        raw = (path / RETENTION_JOURNAL_NAME).read_bytes()
    except FileNotFoundError:
        return {}
    complete = raw[: raw.rfind(b"\n") + 1]
    phases: dict[str, list[Phase]] = {}
    for line in complete.splitlines():
        record = json.loads(line)
        phases.setdefault(record["transaction_id"], []).append(Phase(record["phase"]))
    return phases


def journal_steps_after(fs: CrashFS, index: int) -> list[str]:
    """Describe the steps after `index` that touched the journal file."""
    return [
        str(step)
        for step in fs.steps[index:]
        if step.detail.startswith(RETENTION_JOURNAL_NAME)
    ]


# ------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One operation, one step index k (1-based), one fault, one persistence."""

    op: str
    k: int
    fault: Fault
    persistent: bool

    @property
    def label(self) -> str:
        mode = "persistent" if self.persistent else "transient"
        return f"{self.op}-k{self.k}-{fault_name(self.fault)}-{mode}"

    @property
    def seed(self) -> int:
        return zlib.crc32(self.label.encode())


@dataclass(frozen=True)
class DryRun:
    """The steps an operation takes from its template, unfaulted."""

    op: str
    kinds: tuple[str, ...]
    """The kind of each step (1-based step k is kinds[k-1])."""
    details: tuple[str, ...]
    """What each step touched."""
    log: str


def cases_for(dry: DryRun) -> list[Case]:
    """Every step x errno x transient/persistent; short writes at write steps."""
    cases: list[Case] = []
    for k, kind in enumerate(dry.kinds, 1):
        for fault in FAULTS:
            if fault == "short" and kind != "write":
                continue
            cases.extend(
                Case(dry.op, k, fault, persistent) for persistent in (False, True)
            )
    return cases


class Sweep:
    """Templates built once per directory; dry runs and cases run against copies."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.templates: dict[str, Template] = {}
        self._serial = 0

    def template(self, name: str) -> Template:
        if name not in self.templates:
            self.templates[name] = BUILDERS[name](self.base / "templates")
        return self.templates[name]

    def _workdir(self, label: str) -> Path:
        self._serial += 1
        return self.base / "cases" / f"{self._serial:05d}-{label}"

    def dry_run(self, op_name: str) -> DryRun:
        op = OPERATIONS[op_name]
        tpl = self.template(op.template)
        path = copy_template(tpl, self._workdir(f"{op_name}-dry"))
        fs = CrashFS(path, seed=0)
        clock = FakeClock(tpl.now)
        run = Run(tpl, path, clock, fs)
        start = 0
        if op.opens:
            session = open_session(path, fs=fs, clock=clock)
        else:
            session = open_session(path, fs=fs, clock=clock)
            op.prepare(session, run)
            start = fs.count
            op.call(session, run)
        end = fs.count
        session.close()
        steps = fs.steps[start:end]
        return DryRun(
            op_name,
            tuple(step.op for step in steps),
            tuple(step.detail for step in steps),
            fs.report(),
        )

    def run_case(self, case: Case) -> list[str]:
        """Run one case; return its problems (empty when it passes)."""
        op = OPERATIONS[case.op]
        tpl = self.template(op.template)
        path = copy_template(tpl, self._workdir(case.label))
        fs = CrashFS(path, seed=case.seed)
        clock = FakeClock(tpl.now)
        run = Run(tpl, path, clock, fs)
        problems: list[str] = []
        replay = self._faulted(op, case, run, problems)
        drop_locks(path)
        problems += self._after(op, run, replay.outcome)
        if problems:
            problems.append(f"replay: {replay.report}")
        return problems

    def _faulted(
        self, op: Operation, case: Case, run: Run, problems: list[str]
    ) -> _Replay:
        fs = run.fs
        session: Session | None = None
        if not op.opens:
            session = open_session(run.path, fs=fs, clock=run.clock)
            op.prepare(session, run)
        fs.inject(fs.count + case.k, case.fault, persistent=case.persistent)
        try:
            if op.opens:
                session = open_session(run.path, fs=fs, clock=run.clock)
                outcome = Outcome(value="opened")  # never the session: it must go
            else:
                assert session is not None
                outcome = Outcome(value=op.call(session, run))
        except Exception as error:
            outcome = Outcome.of_error(error)
            del error
        fired = tuple(
            i for i, st in enumerate(fs.steps) if st.outcome.startswith("injected")
        )
        outcome = dataclasses.replace(outcome, fired=fired)
        report = fs.report()
        fs.faults.clear()  # disarmed: what follows in this process is unfaulted
        problems += judge_error(op, case, outcome)
        if fired and not op.surfaced(outcome) and not op.may_swallow(run, outcome):
            failed = ", ".join(str(fs.steps[i]) for i in fired)
            problems.append(
                f"{op.name} returned normally though the injected error hit "
                f"{failed}: the caller never learns of it"
            )
        if session is not None:
            try:
                self._live_checks(op, session, run, outcome, problems)
            finally:
                session.close()
        return _Replay(outcome, report)

    def _live_checks(
        self,
        op: Operation,
        session: Session,
        run: Run,
        outcome: Outcome,
        problems: list[str],
    ) -> None:
        op.check_live(session, run, outcome, problems)
        if outcome.error_type is not ArtifactLeaseJournalError:
            return
        # J4: a write, fsync or truncate error poisoned the journal writer.
        before = run.fs.count
        try:
            session.journal.prepare(
                op.probe_claim(session, run), transaction_id=PROBE_TX
            )
        except ArtifactLeaseJournalError as error:
            if "poisoned" not in str(error):
                problems.append(f"J4 probe refused, but not as poisoned: {error}")
        else:
            problems.append("J4: the poisoned journal writer appended again")
        touched = journal_steps_after(run.fs, before)
        if touched:
            problems.append(f"J4: the poisoned writer touched the journal: {touched}")
        run.data["probed"] = True

    def _after(self, op: Operation, run: Run, outcome: Outcome) -> list[str]:
        problems: list[str] = []
        try:
            session = open_session(run.path, clock=run.clock)
        except Exception as error:
            return [f"reopen with the plain seam failed: {error!r}"]
        try:
            if session.lock._fs is run.fs:
                problems.append("harness: the reopened session kept the faulted lock")
            check_session(session, run, problems)
            check_leases(session, op, run, outcome, problems)
            op.check_after(session, run, outcome, problems)
        finally:
            session.close()
        return problems


@dataclass(frozen=True)
class _Replay:
    outcome: Outcome
    report: str


# ------------------------------------------------------------------- oracle


def judge_error(op: Operation, case: Case, outcome: Outcome) -> list[str]:
    """Say what is wrong with how the call ended (nothing if it is allowed)."""
    if outcome.returned:
        return []
    kind = outcome.error_type
    assert kind is not None
    if case.fault == "short":
        why = "on a short write (writes must loop)"
    elif issubclass(kind, OSError):
        first = outcome.cause_errnos[:1]
        why = "" if first == (case.fault,) else f"with errno {first}, not the injected"
    elif kind is ArtifactLeaseJournalError and op.journal_errors:
        caused = case.fault in outcome.cause_errnos
        why = "" if caused else "not caused by the injected error"
    elif kind is ArtifactSessionReadOnlyError and op.opens:
        # Issue 13: a session whose lock may not be written is refused by name.
        caused = case.fault in {errno.EROFS, errno.EACCES} & set(outcome.cause_errnos)
        why = "" if caused else "not caused by an injected EROFS or EACCES"
    else:
        why = "- not a SPEC error for this operation and fault"
    if not why:
        return []
    return [f"{case.op} raised {kind.__name__} {why}:\n{outcome.error_text}"]


def check_session(session: Session, run: Run, problems: list[str]) -> None:
    """The invariants every reopened session holds, whatever the operation."""
    try:
        session.journal.verify()
    except ArtifactLeaseJournalError as error:
        problems.append(f"journal does not verify after reopen: {error}")
    results = run.path / "tool-results"
    names = sorted(os.listdir(results))
    tmp = [n for n in names if n.startswith(".tmp-")]
    tmp += [n for n in os.listdir(run.path) if ".tmp-" in n]
    if tmp:
        problems.append(f".tmp-* files left after recovery: {tmp}")
    quarantine = run.path / ".quarantine"
    left = sorted(str(p.relative_to(quarantine)) for p in quarantine.rglob("*"))
    if left:
        problems.append(f"quarantine not empty after recovery: {left}")
    recorded = {a.filename: a for a in session.externalizer.artifacts()}
    for name, artifact in recorded.items():
        check_artifact(results / name, artifact.state, artifact, problems)
    allowed_copy = run.data.get("complete_copy_ok")
    for name in names:
        if name.startswith(".tmp-") or name in recorded:
            continue
        data = (results / name).read_bytes()
        if run.tpl.eventless.get(name) == data:
            continue
        if allowed_copy is not None and data == allowed_copy:
            continue
        problems.append(f"{name} in tool-results has no event")
    check_template_artifacts(session, run, recorded, problems)
    check_protected(session, run, problems)


def check_artifact(path: Path, state: str, artifact: Any, problems: list[str]) -> None:
    name = path.name
    if state in {"sealed", "partial", "orphan"}:
        try:
            info = path.lstat()
        except FileNotFoundError:
            problems.append(f"{name} is recorded {state} but missing")
            return
        if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != 0o600:
            problems.append(f"{name} is not a private regular file")
        if info.st_nlink != 1:
            problems.append(f"{name} has {info.st_nlink} links")
        content = artifact.stored_content
        data = path.read_bytes()
        if content is None or (sha256(data), len(data)) != (
            content.content_sha256,
            content.size_bytes,
        ):
            problems.append(f"{name} does not match its recorded digest and size")
    elif state == "deleted":
        if path.exists():
            problems.append(f"{name} is recorded deleted but present")
    else:
        problems.append(f"{name} is {state} after recovery")


def check_template_artifacts(
    session: Session, run: Run, recorded: dict[str, Any], problems: list[str]
) -> None:
    """Every template artifact stays sealed; only GC apply may delete its orphans."""
    deletable: set[str] = set()
    if run.tpl.name == "gc":
        deletable = {run.tpl.roles["orphan"], run.tpl.roles["eventless"]}
    for name, digest in run.tpl.artifacts.items():
        artifact = recorded.get(name)
        state = None if artifact is None else artifact.state
        if state == "deleted" and name in deletable:
            continue
        content = None if artifact is None else artifact.stored_content
        if state != "sealed" or content is None or content.content_sha256 != digest:
            problems.append(f"template artifact {name} is {state}")
    for name, data in run.tpl.eventless.items():
        artifact = recorded.get(name)
        state = None if artifact is None else artifact.state
        if state is None or state == "orphan":
            if sha256((run.path / "tool-results" / name).read_bytes()) != sha256(data):
                problems.append(f"eventless {name} changed")
        elif not (state == "deleted" and name in deletable):
            problems.append(f"eventless {name} is {state}")


def check_protected(session: Session, run: Run, problems: list[str]) -> None:
    """I1: no artifact a live lease protects is absent or changed."""
    for claim in session.journal.current_claims(now=run.clock.now()):
        name = claim.parsed_source_id.filename
        path = run.path / "tool-results" / name
        if not path.is_file() or sha256(path.read_bytes()) != claim.content_sha256:
            problems.append(f"protected {name} is missing or changed")


def check_leases(
    session: Session, op: Operation, run: Run, outcome: Outcome, problems: list[str]
) -> None:
    """One phase per lease, the same in store and journal; old or new for op.tx."""
    journaled = journal_phases(run.path)
    expected = dict(run.tpl.leases)
    txs = set(journaled) | set(expected) | {op.tx, PROBE_TX} - {None}
    for tx in sorted(t for t in txs if t is not None):
        stored = lease_phase(session, tx)
        in_journal = journaled.get(tx, [None])[-1]
        if stored is not in_journal:
            problems.append(f"{tx}: store says {stored}, journal says {in_journal}")
        if tx == op.tx:
            if stored not in op.phases_after:
                problems.append(f"{tx} is {stored}, not one of {op.phases_after}")
            if outcome.returned and stored is not op.phase_if_returned:
                problems.append(f"{tx} is {stored} though {op.name} returned")
        elif tx == PROBE_TX:
            if stored is not (Phase.PREPARED if run.data.get("probed") else None):
                problems.append(f"{tx} is {stored}")
        elif tx in expected and stored is not expected[tx]:
            problems.append(f"{tx} is {stored}, the operation did not move it")
        elif tx not in expected:
            problems.append(f"unexpected lease {tx} ({stored})")
