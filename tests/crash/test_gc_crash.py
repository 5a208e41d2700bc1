"""GC under crashes and damaged state (S6.2, S2.6): a crash at each step."""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.session import (
    ArtifactRetentionJournal,
    Session,
    ToolResultExternalizer,
    open_session,
)
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.errors import (
    ArtifactLeaseJournalError,
    ArtifactRetentionError,
)

from support import gc_children

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from datetime import datetime

    from support.fakes import FakeClock
from support.gc_world import (
    OLD,
    apply_gc,
    claim_of,
    committed,
    deleting,
    entries,
    must_finish_within,
    name_of,
    plan_gc,
    quarantine_of,
    state_of,
    stored,
)

# ------------------------------------------------ S6.2 + S2.6: a crash at each step


@pytest.fixture(scope="module")
def crash_runs() -> Iterator[Callable[..., int]]:
    """Run `gc_children.apply_then_crash` in a forked child; return its exit code."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server = context.Process(target=gc_children.crash_server, args=(theirs,))
    server.start()

    def run(*request: object) -> int:
        ours.send(request)
        if not ours.poll(60):
            pytest.fail("the crash child did not finish within 60 s")
        return int(ours.recv())

    try:
        yield run
    finally:
        ours.send(None)
        server.join(30)
        if server.is_alive():
            server.kill()


@dataclass
class CrashWorld:
    """What a crash test planned, and the bytes every artifact must keep."""

    session_dir: Path
    plan: dict[str, Any]
    when: datetime
    doomed: str
    kept: tuple[str, ...]
    data: dict[str, bytes]
    linked: str | None
    elsewhere: Path | None


def build_crash_world(root: Path, clock: FakeClock, *, put_back: bool) -> CrashWorld:
    """Candidates: one to delete, one leased after planning and, with `put_back`,
    one hard-linked outside after planning; plus one protected all along."""
    root.mkdir()
    session_dir = root / "session"
    tags = ["doomed", "late", "protected"] + (["linked"] if put_back else [])
    with open_session(session_dir, clock=clock) as session:
        refs = {tag: stored(session, tag) for tag in tags}
        committed(session, refs["protected"])
        when = clock.now() + OLD
        plan = plan_gc(session, policy=deleting(), now=when)
        assert len(plan.candidates()) == len(tags) - 1
        elsewhere = None
        if put_back:
            elsewhere = root / "hard-link"
            os.link(refs["linked"].path, elsewhere)
        session.journal.prepare(claim_of(refs["late"]))
    return CrashWorld(
        session_dir=session_dir,
        plan=plan.to_dict(),
        when=when,
        doomed=name_of(refs["doomed"]),
        kept=tuple(name_of(refs[t]) for t in tags if t != "doomed"),
        data={name_of(r): Path(r.path).read_bytes() for r in refs.values()},
        linked=name_of(refs["linked"]) if put_back else None,
        elsewhere=elsewhere,
    )


def check_after_recovery(world: CrashWorld, session: Session) -> None:
    """Deleted with its event, or back in place and sealed; never lost, never stuck."""
    results = world.session_dir / "tool-results"
    assert quarantine_of(world.session_dir) == [], "intent dirs left in .quarantine/"
    doomed_state = state_of(session, world.doomed)
    if doomed_state == "deleted":
        assert not (results / world.doomed).exists(), "deleted, yet still present"
    else:
        assert doomed_state == "sealed", f"the candidate is {doomed_state}"
        assert (results / world.doomed).read_bytes() == world.data[world.doomed]
    for name in world.kept:
        assert state_of(session, name) == "sealed", f"{name} is not sealed"
        assert (results / name).read_bytes() == world.data[name], f"{name} changed"
    if world.linked is not None and world.elsewhere is not None:
        assert world.elsewhere.read_bytes() == world.data[world.linked]
    present = set(world.data) - ({world.doomed} if doomed_state == "deleted" else set())
    assert set(os.listdir(results)) == present
    session.journal.verify()
    # Never stuck: the next run finishes the job.
    plan = plan_gc(session, policy=deleting(), now=world.when)
    apply_gc(session, plan, world.when)
    assert state_of(session, world.doomed) == "deleted"
    assert quarantine_of(world.session_dir) == []


def sweep_crashes(
    tmp_path: Path, clock: FakeClock, run: Callable[..., int], *, put_back: bool
) -> tuple[int, list[str]]:
    """Crash apply at operation 1, 2, 3 ... until it finishes; check each recovery.

    Returns how many operations the apply took and what went wrong, by crash.
    """
    failures: list[str] = []
    crash_at = 0
    while True:
        crash_at += 1
        assert crash_at < 500, "apply never finished"
        root = tmp_path / f"crash-{crash_at:03d}"
        world = build_crash_world(root, clock, put_back=put_back)
        note = root / "crashed-at"
        code = run(
            str(world.session_dir), world.plan, world.when.isoformat(), crash_at,
            str(note),
        )  # fmt: skip
        assert code in {0, gc_children.CRASH_EXIT_CODE}, f"the child failed: {code}"
        where = note.read_text() if code else "no crash"
        try:
            with (
                must_finish_within(30),
                open_session(world.session_dir, clock=clock) as session,
            ):
                check_after_recovery(world, session)
        except (AssertionError, ArtifactLeaseJournalError, OSError) as error:
            first = str(error).splitlines()[0] if str(error) else ""
            failures.append(
                f"crash at operation {crash_at}, {where}: "
                f"{type(error).__name__}: {first}"
            )
        if code == 0:
            return crash_at - 1, failures


def test_a_crash_at_each_step_of_apply_is_resolved_by_the_next_open(
    tmp_path: Path, clock: FakeClock, crash_runs: Callable[..., int]
) -> None:
    operations, failures = sweep_crashes(tmp_path, clock, crash_runs, put_back=False)
    assert operations > 20  # the sweep really went through the apply
    assert not failures, "\n".join(failures)


def test_a_crash_at_each_step_of_an_apply_that_puts_a_file_back(
    tmp_path: Path, clock: FakeClock, crash_runs: Callable[..., int]
) -> None:
    operations, failures = sweep_crashes(tmp_path, clock, crash_runs, put_back=True)
    assert operations > 20
    assert not failures, "\n".join(failures)


# ------------------------------------------- fail-closed: damaged or missing state


def test_gc_refuses_a_damaged_journal(
    session: Session, session_dir: Path, clock: FakeClock
) -> None:
    results = session_dir / "tool-results"
    committed(session, stored(session, "leased"))
    stored(session, "unleased")
    journal = session_dir / RETENTION_JOURNAL_NAME
    data = bytearray(journal.read_bytes())
    data[data.index(b'"phase":"prepared"') + 9] ^= 0x01  # one bit, line 1
    journal.write_bytes(bytes(data))
    when = clock.now() + OLD
    before = entries(results)
    with pytest.raises(ArtifactLeaseJournalError):
        plan_gc(session, policy=deleting(), now=when)
    with pytest.raises(ArtifactLeaseJournalError):
        session.externalizer.cleanup_artifacts_from_journal(
            session.journal, policy=deleting(), now=when
        )
    with pytest.raises(ArtifactRetentionError):  # and no way around it (S6.4)
        session.externalizer.cleanup_artifacts([], policy=deleting(), now=when)
    session.close()
    try:
        reopened = open_session(session_dir, clock=clock)
    except ArtifactLeaseJournalError:
        pass  # refused at open: fine too
    else:
        with reopened, pytest.raises(ArtifactLeaseJournalError):
            plan_gc(reopened, policy=deleting(), now=when)
    assert entries(results) == before


@pytest.mark.parametrize("victim", ["events.sqlite3", "session.json"])
def test_gc_refuses_a_missing_store_or_marker_already_at_open(
    session_dir: Path, clock: FakeClock, victim: str
) -> None:
    with open_session(session_dir, clock=clock) as session:
        committed(session, stored(session, "leased"))
        stored(session, "unleased")
    results = session_dir / "tool-results"
    before = entries(results)
    (session_dir / victim).unlink()
    with pytest.raises(ArtifactLeaseJournalError):
        open_session(session_dir, clock=clock)
    with pytest.raises(ArtifactLeaseJournalError):
        ToolResultExternalizer(session_dir)
    with pytest.raises(ArtifactLeaseJournalError):
        ArtifactRetentionJournal(session_dir)
    assert entries(results) == before
    assert not (session_dir / victim).exists()  # never re-created silently
