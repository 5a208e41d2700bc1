"""T5: real processes killed with SIGKILL, recovered by fresh processes.

Each cycle forks a child (`support.kill_child`) that opens the session (the
recovery pass of a cold start), reports what it recovered, then spills,
publishes through a SQLite owner, removes, reconciles and collects garbage,
acknowledging each operation only after it returned. The test process kills
it with SIGKILL and the next cycle's child recovers.

Where a child dies is drawn by counting, so the test does the same work on
any machine at any load: a random mutating file-system step of a random
operation (the child halts there and waits for its SIGKILL), or the gap after
that operation. One cycle in `ASYNC_EVERY` runs freely and is killed on a
timer instead (its kill can land inside a system call); no assertion counts
on where those land. The test runs until each kind of operation has been
acknowledged `ACKED[kind]` times (and at least `CYCLES` cycles), bounded by
`MAX_CYCLES` and a wall-clock guard that only catches a hang.

The test process keeps the oracle: what was acknowledged, what an
interrupted operation may or may not have done, and which artifacts a GC
apply that started may have deleted. After every recovery it checks

- every acknowledged artifact is present with its digest, unless a started
  GC apply planned to delete it (then it is intact or recorded deleted);
- every live lease's artifact is present with the claimed digest (I1), and no
  GC plan ever names an artifact a live lease protects;
- every acknowledged journal line is still there, bit-identical (I2), and the
  whole journal verifies against the store (J5);
- every lease is in the phase its acknowledged history allows; an owner
  reference is published only for a prepared or committed lease, an aborted
  lease's id is tombstoned, a released one is not published (I3);
- recovery never fails (a torn tail included), never marks anything lost and
  never refuses an entry.

About 20% of cycles start with a >= 16 MiB spill (written in 1 MiB chunks) so
kills tear writes; about one cycle in twenty is killed while the child is
still inside `open_session`. Some cycles also get a synthetic torn journal
tail (a cut record or a NUL run, what a power cut can leave and SIGKILL cannot)
before the next recovery. The seed is printed with every failure and in the
summary line (`pytest -s`); `SPILLVAULT_SIGKILL_SEED` replays a schedule
(kill timing still varies).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import secrets
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from random import Random
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.values import parse_artifact_source_id

from support.kill_child import MiB, Orders, fork_child
from support.tiers import pick

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from pathlib import Path

CYCLES = pick(200, 1000)
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_CYCLES = 3 * CYCLES
ACKED = {
    "spill": CYCLES // 4,
    "publish": CYCLES // 4,
    "remove": CYCLES // 10,
    "reconcile": CYCLES // 10,
    "gc_apply": CYCLES // 10,
}
"""The test runs until each operation has been acknowledged this often."""
EARLY_EVERY = 20
"""Cycle `c` with `c % EARLY_EVERY == EARLY_EVERY // 2` is killed during recovery."""
BIG_EVERY = 5
"""Cycle `c` with `c % BIG_EVERY == BIG_EVERY - 1` starts with a >= 16 MiB spill."""
ASYNC_EVERY = 4
"""Cycle `c` with `c % ASYNC_EVERY == 1` (and no other role) is killed on a timer."""
STOP_OPERATIONS = 6
"""A counted kill lands in one of the first this-many operations after the go."""
STOP_STEPS = 16
"""... at one of its first this-many mutating steps (or just after it)."""
MAX_KILL_DELAY = 0.080
TORN_TAIL_RATE = 0.08
WAIT_SECONDS = 60.0
"""How long a child may stay silent: only a hang guard."""
WALL_LIMIT_SECONDS = pick(1800, 7200)
"""The whole test's hang guard; the work is bounded by `MAX_CYCLES`."""

PREPARED, COMMITTED, ABORTED, RELEASED = "prepared", "committed", "aborted", "released"
LIVE = frozenset({PREPARED, COMMITTED})
NEXT: dict[str | None, frozenset[str]] = {
    None: frozenset({PREPARED}),
    PREPARED: frozenset({COMMITTED, ABORTED}),
    COMMITTED: frozenset({RELEASED}),
    ABORTED: frozenset(),
    RELEASED: frozenset(),
}


def reachable(phase: str | None) -> set[str | None]:
    """The phases a lease in `phase` can be in after interrupted operations."""
    seen: set[str | None] = {phase}
    todo = [phase]
    while todo:
        for nxt in NEXT[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@dataclass
class KnownLease:
    """What the acknowledgements say about one transaction."""

    filename: str | None
    digest: str | None
    phase: str | None = None
    in_doubt: bool = True
    owner_may_be_absent: bool = False
    """A removal started: the owner may have deleted its reference already."""


@dataclass
class KnownArtifact:
    """An acknowledged artifact and its status.

    `present`; `maybe_deleted` once a GC apply that planned it started;
    `deleted` once recorded deleted.
    """

    digest: str
    size: int
    big: bool
    status: str = "present"


@dataclass
class Cycle:
    """What the parent saw of one child."""

    number: int
    early: bool
    opened: bool = False
    recovered: bool = False
    reported: bool = False
    in_flight: tuple[str, bool] | None = None
    stopped: tuple[int, int] | None = None
    """Where a counted kill halted the child: `(operation, step)`."""


@dataclass
class Oracle:
    """The test process's model of the session, fed by the children's messages."""

    session_dir: Path
    seed: int
    artifacts: dict[str, KnownArtifact] = field(default_factory=dict)
    refs: dict[str, Any] = field(default_factory=dict)
    leases: dict[str, KnownLease] = field(default_factory=dict)
    journal_end: int = 0
    journal_sha: str = hashlib.sha256().hexdigest()
    stats: Counter[str] = field(default_factory=Counter)
    recovery_steps: int = 1
    """Mutating steps the last completed recovery took (where early kills land)."""
    digests: dict[tuple[int, int, int, int], str] = field(default_factory=dict)
    synthetic: dict[int, bytes] = field(default_factory=dict)
    """Synthetic torn tails by offset."""

    @property
    def results(self) -> Path:
        return self.session_dir / "tool-results"

    @property
    def journal(self) -> Path:
        return self.session_dir / RETENTION_JOURNAL_NAME

    # orders ----------------------------------------------------------------------

    def orders(self, cycle: int, rng: Random, owner_path: Path, **kw: Any) -> Orders:
        publishable = tuple(
            self.refs[name]
            for name, known in self.artifacts.items()
            if known.status == "present" and not known.big
        )
        removable = tuple(
            tx
            for tx, lease in self.leases.items()
            if lease.phase == COMMITTED
            and not lease.in_doubt
            and not lease.owner_may_be_absent
        )
        report_txs = tuple(
            tx
            for tx, lease in self.leases.items()
            if lease.in_doubt or lease.phase not in {ABORTED, RELEASED}
        )
        report_files = tuple(
            name for name, known in self.artifacts.items() if known.status != "deleted"
        )
        return Orders(
            session_dir=str(self.session_dir),
            owner_path=str(owner_path),
            cycle=cycle,
            seed=rng.getrandbits(64),
            publishable=publishable,
            removable=removable,
            report_txs=report_txs,
            report_files=report_files,
            **kw,
        )

    # messages --------------------------------------------------------------------

    def handle(self, cycle: Cycle, message: tuple[Any, ...]) -> str | None:
        """Apply one message; say "report" or "stopped" when the child waits."""
        kind = message[0]
        if kind == "error":
            msg = f"the child of cycle {cycle.number} failed:\n{message[1]}"
            raise AssertionError(msg)
        if kind == "opening":
            cycle.opened = True
        elif kind == "recovered":
            cycle.recovered = True
            self.recovery_steps = max(message[3], 1)
            self.check_recovery_report(message[2])
        elif kind == "stopped":
            cycle.stopped = (message[1], message[2])
            return "stopped"
        elif kind == "report":
            cycle.reported = True
            self.check_report(message[1])
            return "report"
        elif kind == "begin":
            _, op, details = message
            cycle.in_flight = (op, bool(details.get("big")))
            self.begin(op, details)
        elif kind == "ack":
            _, op, details, journal = message
            cycle.in_flight = None
            self.ack(op, details, journal)
        else:  # pragma: no cover - the protocol has no other message
            msg = f"unexpected message {message!r}"
            raise AssertionError(msg)
        return None

    def protected(self) -> set[str]:
        return {
            lease.filename
            for lease in self.leases.values()
            if lease.filename is not None and (lease.in_doubt or lease.phase in LIVE)
        }

    def begin(self, op: str, details: dict[str, Any]) -> None:
        if op == "publish":
            tx, filename = details["tx"], details["filename"]
            assert tx not in self.leases, f"transaction id {tx} reused"
            assert self.artifacts[filename].status == "present", filename
            self.leases[tx] = KnownLease(filename, details["digest"])
        elif op == "remove":
            lease = self.leases[details["tx"]]
            assert lease.phase == COMMITTED, (details, lease)
            lease.in_doubt = lease.owner_may_be_absent = True
        elif op == "reconcile":
            for lease in self.leases.values():
                if lease.phase == PREPARED or (
                    lease.phase == COMMITTED and lease.owner_may_be_absent
                ):
                    lease.in_doubt = True
        elif op == "gc_apply":
            planned = set(details["planned"])
            wrong = planned & self.protected()
            assert not wrong, f"GC planned to delete protected artifacts: {wrong}"
            for name in planned:
                if name in self.artifacts:
                    self.artifacts[name].status = "maybe_deleted"
        self.stats[f"begun_{op}"] += 1

    def ack(self, op: str, details: dict[str, Any], journal: tuple[int, str]) -> None:
        end, sha = journal
        assert end >= self.journal_end, f"journal shrank: {end} < {self.journal_end}"
        self.journal_end, self.journal_sha = end, sha
        self.stats[f"acked_{op}"] += 1
        if op == "spill":
            ref = details["ref"]
            name = os.path.basename(ref.path)
            assert name not in self.artifacts, f"artifact name {name} reused"
            self.artifacts[name] = KnownArtifact(
                ref.content_sha256, ref.size_bytes, details["big"]
            )
            self.refs[name] = ref
            if details["big"]:
                self.stats["acked_big_spill"] += 1
        elif op == "publish":
            lease = self.leases[details["tx"]]
            lease.phase, lease.in_doubt = COMMITTED, False
        elif op == "remove":
            lease = self.leases[details["tx"]]
            lease.phase, lease.in_doubt = RELEASED, False
        elif op == "reconcile":
            self.ack_reconcile(details["reports"])
        elif op == "gc_apply":
            assert details["error"] is None, f"GC apply stopped: {details['error']}"
            self.ack_gc(details["outcomes"])

    def ack_reconcile(self, reports: list[tuple[str, str]]) -> None:
        """Pending leases first (S5.2), then every committed one, in order."""
        expected = {tx for tx, lease in self.leases.items() if lease.phase in LIVE}
        reported = {tx for tx, _ in reports}
        assert reported == expected, (sorted(reported), sorted(expected))
        for tx, status in reports:
            lease = self.leases[tx]
            if status == "committed":
                assert lease.phase == PREPARED, (tx, lease)
                lease.phase, lease.owner_may_be_absent = COMMITTED, False
                self.stats["reconciled_committed"] += 1
            elif status == "aborted":
                assert lease.phase == PREPARED, (tx, lease)
                lease.phase = ABORTED
                self.stats["reconciled_aborted"] += 1
            elif status == "released":
                assert lease.phase == COMMITTED, (tx, lease)
                assert lease.owner_may_be_absent, f"{tx} released but never removed"
                lease.phase = RELEASED
                self.stats["reconciled_released"] += 1
            elif status == "still_published":
                assert lease.phase == COMMITTED, (tx, lease)
                lease.owner_may_be_absent = False
            else:
                msg = f"unexpected reconciliation status {status!r} for {tx}"
                raise AssertionError(msg)
            lease.in_doubt = False

    def ack_gc(self, outcomes: dict[str, str]) -> None:
        protected = self.protected()
        for name, outcome in outcomes.items():
            known = self.artifacts.get(name)
            assert outcome in {"deleted", "retained_referenced"}, (name, outcome)
            if outcome == "deleted":
                assert name not in protected, f"GC deleted protected {name}"
                self.stats["gc_deleted"] += 1
            if known is not None:
                known.status = "deleted" if outcome == "deleted" else "present"

    # checks after recovery ----------------------------------------------------------

    def check_recovery_report(self, report: dict[str, list[str]]) -> None:
        assert report["marked_lost"] == [], f"recovery lost artifacts: {report}"
        assert report["refused"] == [], f"recovery refused entries: {report}"
        assert report["live_tmp"] == report["live_open"] == [], report
        self.stats["recovery_removed_tmp"] += len(report["removed_tmp"])
        self.stats["recovery_sealed_partial"] += len(report["sealed_partial"])
        self.stats["recovery_quarantine_resolved"] += len(report["quarantine_resolved"])

    def check_report(self, report: dict[str, Any]) -> None:
        """Check a recovered session (its child waits, touching nothing)."""
        self.check_journal_prefix()
        self.check_nothing_half_done()
        self.stats["torn_bytes_at_verify"] += report["verify"]["torn_bytes"]
        phases: dict[str, str | None] = report["phases"]
        live: dict[str, tuple[str, str, str]] = report["live"]
        owner: dict[str, str] = report["owner"]
        for tx, (source_id, digest, phase) in live.items():
            assert phases[tx] == phase, (tx, phases[tx], phase)
            name = parse_artifact_source_id(source_id).filename
            self.leases.setdefault(tx, KnownLease(name, digest))
            self.check_file(name, digest, f"live {phase} lease {tx}")  # I1
        for tx, observed in phases.items():
            assert (observed in LIVE) == (tx in live), (tx, observed)
            lease = self.leases.setdefault(tx, KnownLease(None, None))
            allowed = reachable(lease.phase) if lease.in_doubt else {lease.phase}
            assert observed in allowed, (
                f"{tx} is {observed}; acknowledged {lease.phase}, "
                f"in doubt: {lease.in_doubt}"
            )
            lease.phase, lease.in_doubt = observed, False
        self.check_owner(owner)
        self.check_artifacts(report["files"])

    def check_nothing_half_done(self) -> None:
        """After recovery: no tmp file in tool-results, nothing in quarantine."""
        leftovers = [n for n in os.listdir(self.results) if n.startswith(".tmp-")]
        assert leftovers == [], f"recovery left tmp files: {leftovers}"
        quarantined = [
            os.path.join(root, name)
            for root, _, files in os.walk(self.session_dir / ".quarantine")
            for name in files
        ]
        assert quarantined == [], f"recovery left quarantined files: {quarantined}"

    def check_owner(self, owner: dict[str, str]) -> None:
        """I3: the owner holds references only for prepared or committed leases."""
        for tx, state in owner.items():
            lease = self.leases.get(tx)
            if state == "published":
                assert lease is not None, f"owner holds unknown {tx}"
                assert lease.phase in LIVE, f"owner holds {tx}, which is {lease.phase}"
        for tx, lease in self.leases.items():
            row = owner.get(tx)
            if lease.phase == ABORTED:
                assert row == "tombstoned", f"aborted {tx} not tombstoned: {row}"
            elif lease.phase == RELEASED:
                assert row != "published", f"released {tx} still published"
            elif lease.phase == COMMITTED:
                if not lease.owner_may_be_absent:
                    assert row == "published", f"committed {tx} not held: {row}"
                lease.owner_may_be_absent = row != "published"
            elif lease.phase is None:
                assert row != "published", f"{tx} published, never prepared"
            self.stats["owner_checked"] += 1

    def check_artifacts(self, states: dict[str, str | None]) -> None:
        for name, recorded in states.items():
            known = self.artifacts[name]
            if known.status == "maybe_deleted":
                assert recorded in {"sealed", "deleted"}, (name, recorded)
                known.status = "present" if recorded == "sealed" else "deleted"
            if known.status == "present":
                assert recorded == "sealed", f"{name} acknowledged, now {recorded}"
                self.check_file(name, known.digest, "acknowledged artifact")
            else:
                assert recorded == "deleted", (name, recorded)
                assert not (self.results / name).exists(), f"deleted {name} is back"

    def check_file(self, name: str, digest: str, why: str) -> None:
        path = self.results / name
        try:
            info = path.lstat()
        except FileNotFoundError:
            msg = f"{why}: {name} is missing"
            raise AssertionError(msg) from None
        assert stat.S_ISREG(info.st_mode), f"{why}: {name} is not a regular file"
        key = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if key not in self.digests:
            with path.open("rb") as file:
                self.digests[key] = hashlib.file_digest(file, "sha256").hexdigest()
            self.stats["files_hashed"] += 1
        assert self.digests[key] == digest, f"{why}: {name} has another digest"
        self.stats["files_checked"] += 1

    def check_journal_prefix(self) -> None:
        """I2: the acknowledged journal bytes are still there, bit-identical."""
        data = self.journal.read_bytes() if self.journal.exists() else b""
        prefix = data[: self.journal_end]
        assert len(prefix) == self.journal_end, (
            f"journal has {len(data)} bytes, {self.journal_end} were acknowledged"
        )
        assert hashlib.sha256(prefix).hexdigest() == self.journal_sha, (
            "acknowledged journal bytes changed"
        )

    # between cycles (no child alive) -----------------------------------------------

    def observe_crash_leftovers(self) -> None:
        """Count what the kill left for the next recovery."""
        data = self.journal.read_bytes() if self.journal.exists() else b""
        start = data.rfind(b"\n") + 1
        if start < len(data):
            if self.synthetic.get(start) == data[start:]:
                self.stats["journal_synthetic_tails_left"] += 1
            else:  # SIGKILL tore an append (rare: records are small writes)
                self.stats["journal_torn_tails_from_kills"] += 1
        names = os.listdir(self.session_dir) if self.session_dir.exists() else []
        torn = {n for n in names if n.startswith(f"{RETENTION_JOURNAL_NAME}.torn-")}
        self.stats["journal_torn_copies"] = len(torn)
        self.stats["journal_tmp_leftovers"] = sum(".tmp-" in n for n in names)
        if not self.results.exists():
            return
        for entry in os.scandir(self.results):
            if entry.name.startswith(".tmp-"):
                size = entry.stat(follow_symlinks=False).st_size
                self.stats["artifact_tmp_leftovers"] += 1
                if size >= MiB:
                    self.stats["big_tmp_leftovers"] += 1
                if size % MiB:
                    self.stats["tmp_torn_mid_chunk"] += 1

    def tear_journal_tail(self, rng: Random) -> None:
        """Leave what a power cut during an append leaves: a cut record or NULs."""
        if not self.journal.exists():
            return
        data = self.journal.read_bytes()
        if not data.endswith(b"\n"):
            return
        torn_copy = self.session_dir / f"{RETENTION_JOURNAL_NAME}.torn-{len(data)}"
        if torn_copy.exists():
            # A second, different tear at an offset whose first tear was kept
            # aside has its own test below; do not mix it into this sweep.
            return
        if rng.random() < 0.5:
            last = data[data.rfind(b"\n", 0, len(data) - 1) + 1 :]
            tail = last[: rng.randrange(1, len(last) - 1)]
        else:
            tail = b"\0" * rng.randrange(1, 4096)
        with self.journal.open("ab") as journal:
            journal.write(tail)
        self.synthetic[len(data)] = tail
        self.stats["synthetic_torn_tails"] += 1


# --------------------------------------------------------------------------- driver


def receive(conn: Connection, timeout: float) -> tuple[Any, ...] | None:
    """Return the next message, or None at the end of the stream or on timeout."""
    try:
        if not conn.poll(timeout):
            return None
        message: tuple[Any, ...] = conn.recv()
    except (EOFError, OSError):
        return None
    return message


def kill(pid: int) -> int:
    """SIGKILL `pid` (if still there) and reap it; return its wait status."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return status


def run_cycle(
    oracle: Oracle,
    number: int,
    rng: Random,
    owner_path: Path,
    *,
    big: str | None,
    big_size: int,
    gc_first: bool,
    stop: tuple[int, int] | None,
) -> Cycle:
    """Fork a child, kill it, and feed everything it said to the oracle.

    With a `stop` point the kill comes once the child has halted there; without
    one it comes `U(0, MAX_KILL_DELAY)` after the child's go.
    """
    cycle = Cycle(number, early=stop is not None and stop[0] == 0)
    orders = oracle.orders(
        number,
        rng,
        owner_path,
        big=big,
        big_size=big_size,
        gc_first=gc_first,
        stop=stop,
    )
    pid, conn = fork_child(orders)
    killed = False
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        kill_at: float | None = None
        while True:
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                break
            if now > deadline:
                msg = f"cycle {number}: the child stopped answering"
                raise AssertionError(msg)
            wait = (kill_at if kill_at is not None else deadline) - now
            message = receive(conn, max(wait, 0))
            if message is None:
                if kill_at is not None and time.monotonic() >= kill_at:
                    break
                hung = time.monotonic() > deadline
                status = kill(pid)
                killed = True
                for late in drain(conn):
                    oracle.handle(cycle, late)  # raises with the child's error
                what = "stopped answering" if hung else "ended early"
                msg = f"cycle {number}: the child {what} (wait status {status})"
                raise AssertionError(msg)
            deadline = time.monotonic() + WAIT_SECONDS  # silence, not work, is bounded
            said = oracle.handle(cycle, message)
            if said == "stopped":
                break
            if said == "report":
                conn.send("go")
                if stop is None:
                    kill_at = time.monotonic() + rng.uniform(0, MAX_KILL_DELAY)
        status = kill(pid)
        killed = True
        for late in drain(conn):
            oracle.handle(cycle, late)
        assert os.WIFSIGNALED(status), f"cycle {number}: child exited ({status})"
        assert os.WTERMSIG(status) == signal.SIGKILL, status
    finally:
        if not killed:
            kill(pid)
        conn.close()
    return cycle


def drain(conn: Connection) -> list[tuple[Any, ...]]:
    """Every message left in the pipe of a dead child (a cut one ends the list)."""
    messages = []
    while (message := receive(conn, 0)) is not None:
        messages.append(message)
    return messages


def final_check(oracle: Oracle, owner_path: Path, rng: Random) -> None:
    """Recover once more, unkilled, and check every lease ever seen."""
    orders = oracle.orders(-1, rng, owner_path, check_only=True)
    every = tuple(sorted(set(orders.report_txs) | set(oracle.leases)))
    orders = dataclasses.replace(orders, report_txs=every)
    pid, conn = fork_child(orders)
    cycle = Cycle(-1, early=False)
    try:
        while (message := receive(conn, WAIT_SECONDS)) is not None:
            oracle.handle(cycle, message)
    finally:
        status = kill(pid)
        conn.close()
    assert cycle.reported, "the final recovery did not report"
    assert os.WIFEXITED(status), status
    assert os.WEXITSTATUS(status) == 0, status
    assert not any(lease.in_doubt for lease in oracle.leases.values())


def stop_point(
    oracle: Oracle,
    rng: Random,
    *,
    early: bool,
    big_size: int | None,
    gc_first: bool,
    asynchronous: bool,
) -> tuple[int, int] | None:
    """Where this cycle's child halts for its kill (None: killed on a timer)."""
    if early:  # inside the recovery pass (operation 0)
        return 0, rng.randint(1, oracle.recovery_steps)
    if big_size is not None:  # inside the big spill: one write per MiB at least
        return 1, rng.randint(1, big_size // MiB)
    if asynchronous:
        return None
    first = 2 if gc_first else 1  # a gc_first cycle's collection finishes
    return rng.randint(first, STOP_OPERATIONS), rng.randint(1, STOP_STEPS)


def still_short(stats: Counter[str]) -> dict[str, int]:
    """The operations acknowledged fewer times than `ACKED` asks for, and how many."""
    return {
        op: stats[f"acked_{op}"]
        for op, want in ACKED.items()
        if stats[f"acked_{op}"] < want
    }


@pytest.mark.slow
def test_sigkill_cycles_lose_nothing_acknowledged(tmp_path: Path) -> None:
    seed = int(os.environ.get("SPILLVAULT_SIGKILL_SEED", secrets.randbits(32)))
    rng = Random(seed)  # noqa: S311 - a test's schedule
    session_dir = tmp_path / "session-a"
    owner_path = tmp_path / "owner" / "owner.sqlite3"  # outside the session
    owner_path.parent.mkdir()
    SQLiteOwner(owner_path)
    oracle = Oracle(session_dir, seed)
    started = time.monotonic()
    counts: Counter[str] = Counter()
    number = -1
    collect = False
    try:
        for number in range(MAX_CYCLES):
            if number >= CYCLES and not still_short(oracle.stats):
                break
            if time.monotonic() - started > WALL_LIMIT_SECONDS:
                msg = f"hang guard: {number} cycles in {WALL_LIMIT_SECONDS} s"
                raise AssertionError(msg)
            oracle.observe_crash_leftovers()
            early = number % EARLY_EVERY == EARLY_EVERY // 2
            big = None
            if number % BIG_EVERY == BIG_EVERY - 1:
                # Before an early kill, a stream: its recovery seals 16+ MiB.
                stream = (number + 1) % EARLY_EVERY == EARLY_EVERY // 2
                big = "stream" if stream or rng.random() < 0.5 else "externalize"
            if not early and rng.random() < TORN_TAIL_RATE:
                oracle.tear_journal_tail(rng)
            # After tearing cycles, a collection that finishes: partial 16+ MiB
            # artifacts go, so planning (which hashes every file) stays quick.
            gc_first = big is None and not early and collect
            asynchronous = (
                number % ASYNC_EVERY == 1 and big is None and not early and not gc_first
            )
            big_size = rng.randrange(16 * MiB, 28 * MiB) if big else None
            stop = stop_point(
                oracle,
                rng,
                early=early,
                big_size=big_size,
                gc_first=gc_first,
                asynchronous=asynchronous,
            )
            cycle = run_cycle(
                oracle,
                number,
                rng,
                owner_path,
                big=big,
                big_size=big_size or 16 * MiB,
                gc_first=gc_first,
                stop=stop,
            )
            collect = (collect and not gc_first) or big is not None or early
            counts["cycles"] += 1
            counts["big_cycles"] += big is not None
            counts["gc_first_cycles"] += gc_first
            counts["asynchronous_cycles"] += asynchronous
            if early:
                counts["early_kills"] += 1
                counts["kills_during_recovery"] += cycle.opened and not cycle.recovered
            if cycle.in_flight is not None:
                op, was_big = cycle.in_flight
                counts["kills_mid_operation"] += 1
                counts[f"kills_mid_{op}"] += 1
                counts["kills_mid_big_spill"] += was_big
                counts["counted_kills_mid_operation"] += stop is not None
            counts["counted_kills"] += stop is not None
        number = -1
        oracle.observe_crash_leftovers()
        final_check(oracle, owner_path, rng)
    except Exception as error:
        msg = f"[seed {seed}, cycle {number}; SPILLVAULT_SIGKILL_SEED={seed}] {error}"
        raise AssertionError(msg) from error
    elapsed = time.monotonic() - started
    stats = oracle.stats
    acked = sum(
        v for k, v in stats.items() if k.startswith("acked_") and "big" not in k
    )
    summary = {
        **counts,
        "acked_ops": acked,
        **{k: v for k, v in sorted(stats.items()) if v},
        "seconds": round(elapsed, 1),
    }
    shown = " ".join(f"{key}={value}" for key, value in summary.items())
    print(f"\nT5 SIGKILL seed={seed} {shown}")  # noqa: T201 - the figures, with -s

    # The work asked for was done (bounded by counts, never by time).
    assert still_short(stats) == {}, f"after {MAX_CYCLES} cycles: {summary}"
    # Not vacuous: the kills landed where they matter. Every floor below
    # follows from the counted stop points, not from the machine's speed.
    assert counts["cycles"] >= CYCLES
    assert counts["big_cycles"] >= CYCLES // BIG_EVERY
    assert counts["early_kills"] >= CYCLES // EARLY_EVERY
    landed = counts["kills_during_recovery"]
    assert landed >= max(1, counts["early_kills"] // 2), summary
    assert counts["counted_kills_mid_operation"] >= counts["counted_kills"] // 4, (
        summary
    )
    assert counts["kills_mid_big_spill"] >= counts["big_cycles"] // 2, summary
    assert stats["gc_deleted"] >= CYCLES // 10, summary
    assert stats["recovery_removed_tmp"] + stats["recovery_sealed_partial"] >= (
        CYCLES // BIG_EVERY // 4
    ), summary
    assert stats["files_checked"] >= CYCLES, summary


# ------------------------------------------- torn journal tails and SIGKILL, exactly

RELEASE_AND_DIE = textwrap.dedent(
    """
    import os, signal, sys
    from spillvault.adapters.session import open_session
    from support.intercept import InterceptingFS

    def die(call):
        os.kill(os.getpid(), signal.SIGKILL)

    def fsync_and_die(call, result):
        os.fsync(call["fd"])
        die(call)

    # The real seam; the process SIGKILLs itself inside the journal's J6
    # step: at "link", before the kept-aside copy gets its name; at
    # "truncate", once the torn tail is kept aside and cut off.
    fs = InterceptingFS()
    if sys.argv[3] == "link":
        fs.before("link", die, when=lambda call: ".torn-" in call["dst"])
    if sys.argv[3] == "truncate":
        fs.after("ftruncate", fsync_and_die)
    session = open_session(sys.argv[1], fs=fs)
    session.journal.release(sys.argv[2])  # its append meets the torn tail
    """
)

PUBLISH = textwrap.dedent(
    """
    import sys
    from spillvault.adapters.session import open_session
    from spillvault.domain.values import ArtifactRetentionClaim

    with open_session(sys.argv[1]) as session:
        ref = session.externalizer.externalize("output line\\n" * 5000, "bash").artifact
        claim = ArtifactRetentionClaim.from_memory_reference(ref.for_memory())
        tx = sys.argv[2]
        session.journal.publish_reference(claim, lambda: None, transaction_id=tx)
    """
)

REOPEN = textwrap.dedent(
    """
    import sys
    from spillvault.adapters.session import open_session

    with open_session(sys.argv[1]) as session:
        print(session.journal.verify().to_dict())
        print(session.store.get_lease(sys.argv[2]).phase.value)
    """
)


def python(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter (a fresh process, a cold start).

    `support` is importable there, as it is here.
    """
    path = [TESTS_DIR, *filter(None, [os.environ.get("PYTHONPATH")])]
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        timeout=120,
    )


def torn_journal(session_dir: Path, tail: bytes) -> int:
    """Publish `tx-1` in a fresh process, then tear the journal; return the offset."""
    done = python(PUBLISH, str(session_dir), "tx-1")
    assert done.returncode == 0, done.stderr
    journal = session_dir / RETENTION_JOURNAL_NAME
    end = journal.stat().st_size
    with journal.open("ab") as file:
        file.write(tail)
    return end


def kept_tails(session_dir: Path) -> dict[str, bytes]:
    prefix = f"{RETENTION_JOURNAL_NAME}.torn-"
    return {
        path.name: path.read_bytes()
        for path in session_dir.iterdir()
        if path.name.startswith(prefix)
    }


def test_a_second_torn_tail_at_an_offset_already_kept_aside_still_recovers(
    tmp_path: Path,
) -> None:
    """J5/J6: recovery never fails on a torn tail, even a second one at one offset.

    A power cut tears an append at offset X; the next process keeps the tail
    aside as `.torn-X`, truncates, and is SIGKILLed before its own append. The
    append after that is torn at X again, with other bytes (another record).
    The session must still open, and both tails must be kept.
    """
    session_dir = tmp_path / "session-a"
    first_tear = b'{"at":"2026-01-01T00:00:00'
    end = torn_journal(session_dir, first_tear)
    died = python(RELEASE_AND_DIE, str(session_dir), "tx-1", "truncate")
    assert died.returncode == -signal.SIGKILL, died.stderr
    journal = session_dir / RETENTION_JOURNAL_NAME
    assert kept_tails(session_dir) == {f"{journal.name}.torn-{end}": first_tear}
    assert journal.stat().st_size == end
    second_tear = b"\0" * 700
    with journal.open("ab") as file:
        file.write(second_tear)
    reopened = python(REOPEN, str(session_dir), "tx-1")
    assert reopened.returncode == 0, reopened.stderr
    assert reopened.stdout.splitlines()[-1] == "released"
    kept = kept_tails(session_dir)
    assert kept[f"{journal.name}.torn-{end}"] == first_tear
    assert second_tear in kept.values(), "the second tear was not kept aside"


def test_a_kill_while_keeping_a_torn_tail_aside_leaves_no_tmp_file(
    tmp_path: Path,
) -> None:
    """J6 + S2.6: a SIGKILL inside the keep-aside step leaves no stray tmp file.

    The copy of the torn tail is written to a `.<journal>.tmp-*` file and
    linked to its `.torn-<offset>` name; killed in between, the tmp file
    stays. The next process must finish the job without leaving it behind.
    """
    session_dir = tmp_path / "session-a"
    tail = b'{"at":"2026-01-01T00:00:00'
    end = torn_journal(session_dir, tail)
    died = python(RELEASE_AND_DIE, str(session_dir), "tx-1", "link")
    assert died.returncode == -signal.SIGKILL, died.stderr
    reopened = python(REOPEN, str(session_dir), "tx-1")
    assert reopened.returncode == 0, reopened.stderr
    assert reopened.stdout.splitlines()[-1] == "released"
    assert kept_tails(session_dir) == {f"{RETENTION_JOURNAL_NAME}.torn-{end}": tail}
    strays = [p.name for p in session_dir.iterdir() if ".tmp-" in p.name]
    assert strays == [], f"stray tmp files after recovery: {strays}"
