"""I/O-error sweep (issue 6 item 6; reliability note T4; SPEC S2, S4, S6, J3-J6).

Each public operation x each of its filesystem steps x {EIO, ENOSPC, EDQUOT,
EROFS, EACCES, short write} x {transient, persistent}, every case from a fresh
copy of a prepared starting state, through `CrashFS`. The operations: session
creation and opening a session that needs recovery (stale tmp, quarantine
intent, journal behind the store with a torn tail), spill (`externalize` of
a >30,000-char and a >2 MiB output; the gate's `process`), `prepare`,
`publish_reference`, `commit`, `remove_reference`, `reconcile_pending`, GC
plan and GC apply. A short write is swept only at write steps (it hits
nothing else). The oracle and the starting states are in `support.io_sweep`.

Case counts (measured from the dry runs; the tests print them live):
1,508 cases in all (`SPILLVAULT_TEST_TIER=long`); the fast tier runs a fixed,
seeded sample of `FAST_PER_STEP` = 4 cases per step of each operation, 592
cases, so every step index of every operation is hit (about 15 s of CPU, 20-30 s
wall on this 2-core machine; the long tier takes 35-55 s).

Also: J4 after a failed fsync, write or truncate of a journal append (the
writer refuses every further append in the process until a reopen), and
short reproductions of what the sweep found.
"""

from __future__ import annotations

import errno
import re
import zlib
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.session import ArtifactRetentionJournal, open_session
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactLeasePhase
from spillvault.domain.errors import ArtifactLeaseJournalError

from support.crashfs import CrashFS
from support.fakes import FakeClock
from support.io_sweep import (
    OPERATIONS,
    SESSION,
    Case,
    Sweep,
    cases_for,
    claim_on,
    copy_template,
    journal_phases,
    journal_steps_after,
    lease_phase,
    owner_presence,
)
from support.locks import drop_locks
from support.tiers import LONG, sample

if TYPE_CHECKING:
    from pathlib import Path

    from support.io_sweep import DryRun

Phase = ArtifactLeasePhase
FAST_PER_STEP = 4
SHOWN_FAILURES = 3

# What each operation must at least do through the seam: a dry run with fewer
# kinds of steps means the seam was bypassed and the sweep would prove nothing.
REQUIRED_KINDS: dict[str, set[str]] = {
    "create_session": {"mkdir", "open", "fchmod", "write", "fsync"},
    "spill": {"open", "write", "fsync", "link", "unlink"},
    "spill_big": {"open", "write", "fsync", "link", "unlink"},
    "spill_gate": {"open", "write", "fsync", "link", "unlink"},
    "prepare": {"open", "write", "fsync"},
    "publish_reference": {"write", "fsync"},
    "commit": {"write", "fsync"},
    "remove_reference": {"write", "fsync"},
    "reconcile_pending": {"write", "fsync"},
    "gc_plan": {"open", "mkdir"},
    "gc_apply": {"mkdir", "rename", "unlink", "rmdir", "fsync"},
    "open_session": {"unlink", "link", "ftruncate", "write", "fsync", "rmdir"},
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    return Sweep(tmp_path_factory.mktemp("io-sweep"))


def chosen(cases: list[Case]) -> list[Case]:
    """All cases in the long tier; `FAST_PER_STEP` seeded ones per step otherwise."""
    by_step: dict[int, list[Case]] = defaultdict(list)
    for case in cases:
        by_step[case.k].append(case)
    picked: list[Case] = []
    for k, group in sorted(by_step.items()):
        seed = zlib.crc32(f"{group[0].op}:{k}".encode())
        picked += sample(group, FAST_PER_STEP, seed=seed)
    return picked


def problem_kind(problem: str) -> str:
    """The first line of a problem, without random names and descriptor numbers."""
    line = re.sub(r"[0-9a-f]{16,}", "*", problem.splitlines()[0])
    return re.sub(r"\bfd \d+", "fd N", line)[:160]


def describe_failures(failures: list[tuple[Case, list[str]]], ran: int) -> str:
    kinds = Counter(problem_kind(problems[0]) for _, problems in failures)
    lines = [f"{len(failures)} of {ran} cases failed; first problems:"]
    lines += [f"  {count:4d} x {problem}" for problem, count in kinds.most_common()]
    for case, problems in failures[:SHOWN_FAILURES]:
        lines.append(f"\n--- {case.label}")
        lines += problems
    rest = [case.label for case, _ in failures[SHOWN_FAILURES:]]
    if rest:
        lines.append(f"\n... and {len(rest)} more: {', '.join(rest)}")
    return "\n".join(lines)


def test_sweep_covers_every_operation(sweep: Sweep) -> None:
    assert set(REQUIRED_KINDS) == set(OPERATIONS)
    total = fast = 0
    for name in OPERATIONS:
        dry: DryRun = sweep.dry_run(name)
        missing = REQUIRED_KINDS[name] - set(dry.kinds)
        assert not missing, f"{name} made no {sorted(missing)} step:\n{dry.log}"
        cases = cases_for(dry)
        total += len(cases)
        fast += sum(min(FAST_PER_STEP, n) for n in Counter(c.k for c in cases).values())
        print(f"{name}: {len(dry.kinds)} steps, {len(cases)} cases")  # noqa: T201
    tier = "long" if LONG else "fast"
    print(f"I/O-error sweep: {total} cases in all, {fast} in the fast tier ({tier})")  # noqa: T201
    assert total >= 1000  # every operation still goes through the seam


@pytest.mark.parametrize("op_name", list(OPERATIONS))
def test_io_error_sweep(sweep: Sweep, op_name: str) -> None:
    dry = sweep.dry_run(op_name)
    cases = cases_for(dry)
    run = chosen(cases)
    print(  # noqa: T201
        f"{op_name}: {len(dry.kinds)} steps {dry.kinds}; "
        f"{len(cases)} cases, running {len(run)}"
    )
    failures = []
    for case in run:
        problems = sweep.run_case(case)
        if problems:
            failures.append((case, problems))
    if failures:
        pytest.fail(describe_failures(failures, len(run)), pytrace=False)


# --------------------------------------------------------------------------- J4


J4_FAULTS = {
    # name: (template, errno, step kinds hit, torn tail before the append)
    "fsync_of_an_append": ("leases", errno.EIO, {"fsync"}, False),
    "fsync_of_a_new_journal": ("artifact", errno.EIO, {"fsync"}, False),
    "write_of_an_append": ("leases", errno.ENOSPC, {"write"}, False),
    "truncate_of_a_torn_tail": ("leases", errno.EIO, {"ftruncate"}, True),
}


@pytest.mark.parametrize("where", list(J4_FAULTS))
def test_j4_a_failed_journal_append_poisons_the_writer_until_reopen(
    sweep: Sweep, tmp_path: Path, where: str
) -> None:
    template, err, ops, torn = J4_FAULTS[where]
    tpl = sweep.template(template)
    path = copy_template(tpl, tmp_path / "case")
    fs = CrashFS(path, seed=4)
    clock = FakeClock(tpl.now)
    session = open_session(path, fs=fs, clock=clock)
    journal = session.journal
    leased = tpl.roles["leased"]
    claim = claim_on(session, leased)
    if torn:  # an earlier append cut short: J6 truncates it before appending
        with (path / RETENTION_JOURNAL_NAME).open("ab") as handle:
            handle.write(b'{"torn":')
    fault = fs.inject(fs.count + 1, err, ops=ops)
    with pytest.raises(ArtifactLeaseJournalError, match="poisoned") as failed:
        journal.prepare(claim, transaction_id="tx-1")
    replay = fs.report()
    assert fault.fired == 1, replay
    cause = failed.value.__cause__
    assert isinstance(cause, OSError), replay
    assert cause.errno == err, replay
    del failed, cause  # their tracebacks hold the session
    failed_at = fs.count
    on_disk = (path / RETENTION_JOURNAL_NAME).read_bytes()

    # No fault is armed any more: the writer itself refuses (J4).
    with pytest.raises(ArtifactLeaseJournalError, match="poisoned"):
        journal.prepare(claim, transaction_id="tx-2")
    published: list[str] = []
    with pytest.raises(ArtifactLeaseJournalError, match="poisoned"):
        journal.publish_reference(
            claim, lambda: published.append("tx-3"), transaction_id="tx-3"
        )
    assert published == []  # S4.5: no owner call before the journal holds PREPARED
    if "tx-p" in tpl.leases:
        with pytest.raises(ArtifactLeaseJournalError, match="poisoned"):
            journal.commit("tx-p")
    other = ArtifactRetentionJournal(session.path, session=session)
    with pytest.raises(ArtifactLeaseJournalError, match="poisoned"):
        other.prepare(claim, transaction_id="tx-4")
    assert journal_steps_after(fs, failed_at) == [], fs.report()
    assert (path / RETENTION_JOURNAL_NAME).read_bytes() == on_disk
    session.close()
    del session, journal, other
    drop_locks(path)

    # A reopen recovers: catch-up journals what the store holds (S4.5).
    with open_session(path, clock=clock) as reopened:
        report = reopened.journal.verify()
        assert report.torn_bytes == 0
        phases = journal_phases(path)
        for tx in ("tx-1", "tx-2", "tx-3", "tx-4"):
            assert lease_phase(reopened, tx) is Phase.PREPARED, replay
            assert phases[tx] == [Phase.PREPARED], replay
        if "tx-p" in tpl.leases:
            assert lease_phase(reopened, "tx-p") is Phase.COMMITTED
            assert phases["tx-p"][-1] is Phase.COMMITTED
        reopened.journal.commit("tx-1")
        assert journal_phases(path)["tx-1"] == [Phase.PREPARED, Phase.COMMITTED]
        reopened.journal.verify()


# ------------------------------------------------- what the sweep found, alone


def test_reconcile_pending_does_not_hide_a_failed_journal_append(
    sweep: Sweep, tmp_path: Path
) -> None:
    """S5.2/J4: the reconciler that recorded ABORTED must not report it as another's.

    The owner seals tx-p's absence, ABORTED is recorded in the store, then
    the journal append fails (EIO on the write). The call must raise the
    poisoned writer's `ArtifactLeaseJournalError`, as `abort()` would.
    """
    tpl = sweep.template("leases")
    path = copy_template(tpl, tmp_path / "case")
    fs = CrashFS(path, seed=5)
    owner = InMemoryOwner()
    with open_session(path, fs=fs, clock=FakeClock(tpl.now)) as session:
        session.journal  # noqa: B018 - opened before the fault
        fault = fs.inject(fs.count + 1, errno.EIO, ops={"write"})
        reports: object = None
        error: ArtifactLeaseJournalError | None = None
        try:
            reports = session.journal.reconcile_pending(owner)
        except ArtifactLeaseJournalError as raised:
            error = raised
        assert fault.fired == 1, fs.report()
        assert lease_phase(session, "tx-p") is Phase.ABORTED
    assert owner_presence(owner, "tx-p") == "sealed"  # S5.3: tombstone first
    assert error is not None, (
        f"reconcile_pending returned {reports!r} after the journal append failed "
        f"with EIO:\n{fs.report()}"
    )
    assert "poisoned" in str(error)


def test_session_creation_cut_short_by_an_io_error_can_be_finished(
    tmp_path: Path,
) -> None:
    """S4.4: an interrupted creation (no usable marker) is finished by the next open.

    One transient EIO on the write of `session.json` during creation must not
    leave an empty marker that refuses every later open.
    """
    path = tmp_path / SESSION
    fs = CrashFS(path, seed=6)
    fs.inject(1, errno.EIO, ops={"write"})  # a creation's only write is the marker
    with pytest.raises(OSError, match="Input/output") as failed:
        open_session(path, fs=fs, clock=FakeClock())
    assert failed.value.errno == errno.EIO
    assert any("session.json" in st.detail for st in fs.steps), fs.report()
    del failed
    drop_locks(path)
    with open_session(path, clock=FakeClock()) as session:
        assert session.journal.verify().records == 0


def test_a_failed_torn_tail_copy_leaves_no_tmp_file(
    sweep: Sweep, tmp_path: Path
) -> None:
    """J6/S2.6: a transient error while keeping a torn tail aside leaves no litter.

    The copy goes through `.retention-leases.jsonl.tmp-*`; a failed fchmod of
    that new file must not leave it behind for good (no recovery removes it).
    """
    dry = sweep.dry_run("open_session")
    created = next(
        k
        for k, (kind, detail) in enumerate(zip(dry.kinds, dry.details, strict=True), 1)
        if kind == "open" and detail.startswith(f".{RETENTION_JOURNAL_NAME}.tmp-")
    )
    assert dry.kinds[created] == "fchmod", dry.log  # step created + 1
    tpl = sweep.template("recovery")
    path = copy_template(tpl, tmp_path / "case")
    fs = CrashFS(path, seed=7)
    fs.inject(created + 1, errno.EIO)
    with pytest.raises(ArtifactLeaseJournalError, match="poisoned"):
        open_session(path, fs=fs, clock=FakeClock(tpl.now))
    drop_locks(path)
    with open_session(path, clock=FakeClock(tpl.now)) as session:
        session.journal.verify()
    litter = sorted(p.name for p in path.iterdir() if ".tmp-" in p.name)
    assert litter == [], fs.report()
