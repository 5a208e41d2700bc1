"""The child side of the SIGKILL crash test (test_crash_sigkill.py, T5).

The test process forks one child per cycle (`fork_child`). A child is a fresh
process as far as the library is concerned: the parent never opens a session,
so the child inherits no session, lock, store connection or view, and opening
the session runs the full recovery pass of a cold start.

A child talks to its parent over a pipe:

- `("opening",)` just before `open_session` (the recovery pass starts);
- `("recovered", seconds, recovery_report)` once `open_session` returned;
- `("report", {...})` what the recovered session holds (see `inspect`);
- then it waits for the parent's `"go"` (the parent checks the files while
  nothing runs), and for every operation sends `("begin", op, details)` before it
  starts and `("ack", op, details, journal)` only after it returned (the
  library fsyncs before returning), where `journal` is `(end, sha256)` of
  the journal's complete lines at that moment;
- `("stopped", op, step)` when it reached its stop point (see below); it then
  sleeps until killed;
- `("error", traceback)` if anything raised; the child then exits with 1.

Where a child dies is chosen by counting, not by a timer, so the same work is
done on a fast machine and on a loaded one. Its `Stopper`, hooked into the
seam (an `InterceptingFS`), counts the mutating file-system steps of each
operation (operation 0 is `open_session`, the recovery pass; then 1, 2, ...
in order). `Orders.stop` = `(op, step)` halts the child just before that step
of that operation, or, if the operation ends first, right after it (between
two operations). Without a stop point the child runs freely and the parent
kills it on a timer (the asynchronous cycles: a kill can land inside a system
call there).

The child loops until its parent kills it with SIGKILL. The parent reads
while the child works, so a send never blocks; a message a kill cuts short
fails to unpickle and counts as never sent (the operation stays in doubt).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import sqlite3
import time
import traceback
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spillvault.adapters.owners.owner_common import RECORD_TABLE
from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.session import Session, open_session
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactCleanupStatus
from spillvault.domain.machines import LEASE_MACHINE
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactReference,
    ArtifactRetentionClaim,
)

from support.crashfs import COUNTED
from support.intercept import InterceptingFS

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from support.intercept import Call

MiB = 1 << 20
GC_TTL_SECONDS = 3600.0
GC_AHEAD = timedelta(days=2)
"""GC runs this far in the future: every unprotected artifact is old enough."""
LIVE_LEASE_SOFT_LIMIT = 25
"""Above this many removable leases a child prefers removals (bounded work)."""

# Relative weights of the operations a child draws.
WEIGHTS = {"spill": 30, "publish": 24, "remove": 18, "reconcile": 10, "gc": 14}


@dataclass(frozen=True)
class Orders:
    """What one child is told by its parent (inherited through fork)."""

    session_dir: str
    owner_path: str
    cycle: int
    seed: int
    big: str | None = None
    """None, or how the first operation stores >= 16 MiB: externalize | stream."""
    big_size: int = 16 * MiB
    publishable: tuple[ArtifactReference, ...] = ()
    """Small acknowledged artifacts the parent knows are present."""
    removable: tuple[str, ...] = ()
    """Committed leases whose owner holds the reference."""
    report_txs: tuple[str, ...] = ()
    """Transactions whose phase the report must give."""
    report_files: tuple[str, ...] = ()
    """Artifacts whose recorded state the report must give."""
    gc_first: bool = False
    """Collect garbage first (the parent waits for it before arming the kill)."""
    check_only: bool = False
    """Recover and report, then exit 0 (no operations)."""
    stop: tuple[int, int] | None = None
    """`(op, step)`: where the child halts for its kill; None: run freely."""


MUTATING = sorted(COUNTED - {"open", "mark"})  # open counts only when it creates


def _creates(call: Call) -> bool:
    """Say whether an `open` may create or truncate."""
    return bool(call["flags"] & (os.O_CREAT | os.O_TRUNC))


class Stopper:
    """Counts each operation's mutating steps through the seam; halts at `stop`."""

    def __init__(self, conn: Connection, stop: tuple[int, int] | None) -> None:
        self.conn = conn
        self.stop = stop
        self.op = 0
        self.steps = 0

    def hook(self, fs: InterceptingFS) -> None:
        """Count the mutating calls through `fs` (`open` when it may create)."""
        fs.before(MUTATING, self.step)
        fs.before("open", self.step, when=_creates)

    def step(self, call: Call) -> None:
        """Count one step of the running operation; halt before the chosen one."""
        self.steps += 1
        if self.stop == (self.op, self.steps):
            self.halt()

    def next_operation(self) -> None:
        """Start the next operation; halt if the chosen one ended short of its step."""
        if self.stop is not None and self.stop[0] == self.op:
            self.halt()
        self.op += 1
        self.steps = 0

    def halt(self) -> None:
        """Tell the parent where we are, then wait for its SIGKILL."""
        self.conn.send(("stopped", self.op, self.steps))
        while True:
            time.sleep(3600)


def fork_child(orders: Orders) -> tuple[int, Connection]:
    """Fork a child running `orders`; return its pid and the parent's pipe end."""
    ours, theirs = multiprocessing.Pipe(duplex=True)
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test process
        code = 1
        try:
            ours.close()
            run(theirs, orders)
            code = 0
        except BaseException:  # reported to the parent, which fails the test
            with suppress(BaseException):
                theirs.send(("error", traceback.format_exc()))
        finally:
            os._exit(code)
    theirs.close()
    return pid, ours


def run(conn: Connection, orders: Orders) -> None:
    """Recover the session, report it, then work until killed (or exit if told)."""
    stopper = Stopper(conn, orders.stop)
    fs = InterceptingFS()
    stopper.hook(fs)
    conn.send(("opening",))
    started = time.perf_counter()
    session = open_session(orders.session_dir, fs=fs)
    elapsed = time.perf_counter() - started
    recovery = session.recovery.to_dict() if session.recovery is not None else {}
    conn.send(("recovered", elapsed, recovery, stopper.steps))
    owner = SQLiteOwner(orders.owner_path)
    conn.send(("report", inspect(session, orders)))
    if orders.check_only:
        session.close()
        return
    if conn.recv() != "go":  # the parent checks the report while we wait
        return
    Worker(conn, session, owner, orders, stopper).run()


def inspect(session: Session, orders: Orders) -> dict[str, Any]:
    """Return what the recovered session and the owner hold, for the parent's oracle.

    - `verify`: the whole journal verified against the store (J5);
    - `live`: every live (prepared or committed) lease's claim;
    - `phases`: the phase of each asked or live transaction, and of each one
      the owner holds published;
    - `owner`: every owner row's state;
    - `files`: the recorded state of each asked artifact.
    """
    verify = session.journal.verify().to_dict()
    recovered = session.journal.recover()
    live = {
        state.transaction.transaction_id: (
            state.transaction.claim.source_id,
            state.transaction.claim.content_sha256,
            state.current_phase.value,
        )
        for state in recovered.states
        if state.current_phase in LEASE_MACHINE.live_states
    }
    owner = owner_rows(orders.owner_path)
    phases: dict[str, str | None] = {}
    published = {tx for tx, state in owner.items() if state == "published"}
    for tx in sorted(set(orders.report_txs) | set(live) | published):
        lease = session.store.find_lease(tx)
        phases[tx] = None if lease is None else lease.phase.value
    records = session_projection(session).artifact_records()
    files = {
        name: (records[name].state.value if name in records else None)
        for name in orders.report_files
    }
    return {
        "verify": verify,
        "live": live,
        "phases": phases,
        "owner": owner,
        "files": files,
    }


def owner_rows(owner_path: str) -> dict[str, str]:
    """Read every owner row's state straight from the SQLite file."""
    connection = sqlite3.connect(owner_path, timeout=30)
    try:
        rows = connection.execute(
            f"SELECT transaction_id, state FROM {RECORD_TABLE}"  # noqa: S608 - a constant
        ).fetchall()
    finally:
        connection.close()
    return {str(tx): str(state) for tx, state in rows}


@dataclass
class JournalHasher:
    """SHA-256 of the journal's complete lines, read incrementally.

    Only bytes up to the last newline count: an unterminated tail is a torn
    append that the next append may cut off (J6).
    """

    path: str
    end: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)

    def state(self) -> tuple[int, str]:
        """Return `(end, sha256)` of the complete lines now in the journal."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return self.end, self.hasher.hexdigest()
        try:
            size = os.fstat(fd).st_size
            data = os.pread(fd, max(size - self.end, 0), self.end)
        finally:
            os.close(fd)
        cut = data.rfind(b"\n") + 1
        self.hasher.update(data[:cut])
        self.end += cut
        return self.end, self.hasher.hexdigest()


class Worker:
    """Spills, publishes, removes, reconciles and collects until killed."""

    def __init__(
        self,
        conn: Connection,
        session: Session,
        owner: SQLiteOwner,
        orders: Orders,
        stopper: Stopper,
    ) -> None:
        self.conn = conn
        self.stopper = stopper
        self.session = session
        self.owner = owner
        self.orders = orders
        self.rng = random.Random(orders.seed)  # noqa: S311 - a test's schedule
        self.publishable = list(orders.publishable)
        self.removable = list(orders.removable)
        self.count = 0
        self.journal = JournalHasher(
            os.path.join(orders.session_dir, RETENTION_JOURNAL_NAME)
        )

    def run(self) -> None:
        if self.orders.big is not None:
            self.stopper.next_operation()
            self.big_spill()
        elif self.orders.gc_first:
            self.stopper.next_operation()
            self.gc()
        while True:
            self.count += 1
            self.stopper.next_operation()
            getattr(self, self.choose())()

    def choose(self) -> str:
        weights = dict(WEIGHTS)
        if not self.publishable:
            weights["publish"] = 0
        if not self.removable:
            weights["remove"] = 0
        elif len(self.removable) > LIVE_LEASE_SOFT_LIMIT:
            weights["remove"] *= 4
        ops = list(weights)
        return self.rng.choices(ops, weights=[weights[op] for op in ops])[0]

    # messages ------------------------------------------------------------------

    def begin(self, op: str, **details: Any) -> None:
        self.conn.send(("begin", op, details))

    def ack(self, op: str, **details: Any) -> None:
        self.conn.send(("ack", op, details, self.journal.state()))

    # operations ----------------------------------------------------------------

    def spill(self) -> None:
        """Store a small output (40-300 KB) through `externalize`."""
        size = self.rng.randint(40_000, 300_000)
        line = f"cycle {self.orders.cycle} op {self.count} {self.rng.random()}\n"
        text = line * (size // len(line) + 1)
        self.begin("spill", size=len(text), big=False)
        ref = self.session.externalizer.externalize(text, "bash").artifact
        self.publishable.append(ref)
        self.ack("spill", ref=ref, big=False)

    def big_spill(self) -> None:
        """Store >= 16 MiB (1 MiB chunks): a kill in the middle tears the write."""
        size = self.orders.big_size
        head = f"cycle {self.orders.cycle} big {self.rng.random()}\n".encode()
        self.begin("spill", size=size, big=True, mode=self.orders.big)
        ext = self.session.externalizer
        if self.orders.big == "stream":
            stream = ext.open_stream("bash")
            stream.write(head)
            block = (b"s" * 1023 + b"\n") * 1024
            for _ in range(size // MiB):
                stream.write(block)
            ref = stream.close().artifact
        else:
            text = head.decode() + ("e" * 1023 + "\n") * (size // 1024)
            ref = ext.externalize(text, "bash").artifact
        assert ref is not None  # a stored stream has a reference
        self.ack("spill", ref=ref, big=True)

    def publish(self) -> None:
        ref = self.rng.choice(self.publishable)
        tx = f"tx-{self.orders.cycle}-{self.count}"
        memory = ref.for_memory()
        self.begin(
            "publish",
            tx=tx,
            filename=os.path.basename(ref.path),
            digest=ref.content_sha256,
        )
        self.session.journal.publish_reference(
            ArtifactRetentionClaim.from_memory_reference(memory),
            self.owner.publisher(memory, tx),
            transaction_id=tx,
        )
        self.removable.append(tx)
        self.ack("publish", tx=tx)

    def remove(self) -> None:
        tx = self.removable.pop(self.rng.randrange(len(self.removable)))
        self.begin("remove", tx=tx)
        self.session.journal.remove_reference(tx, self.owner.remover(tx))
        self.ack("remove", tx=tx)

    def reconcile(self) -> None:
        self.begin("reconcile")
        journal = self.session.journal
        reports = journal.reconcile_pending(self.owner)
        reports += journal.reconcile_releases(self.owner)
        self.ack(
            "reconcile", reports=[(r.transaction_id, r.status.value) for r in reports]
        )

    def gc(self) -> None:
        now = datetime.now(UTC) + GC_AHEAD
        policy = ArtifactCleanupPolicy(orphan_ttl_seconds=GC_TTL_SECONDS, dry_run=False)
        ext = self.session.externalizer
        self.begin("gc_plan")
        plan = ext.plan_cleanup_from_journal(
            self.session.journal, policy=policy, now=now
        )
        planned = sorted(
            d.filename
            for d in plan.decisions
            if d.status is ArtifactCleanupStatus.PLANNED_DELETE
        )
        self.begin("gc_apply", planned=planned)
        gone = set(planned)
        self.publishable = [
            ref for ref in self.publishable if os.path.basename(ref.path) not in gone
        ]
        report = ext.apply_cleanup_from_journal(plan, self.session.journal, now=now)
        self.ack(
            "gc_apply",
            outcomes={
                d.filename: d.status.value
                for d in report.decisions
                if d.filename in gone
            },
            error=report.error,
        )


__all__ = ["GC_TTL_SECONDS", "MiB", "Orders", "fork_child", "owner_rows", "run"]
