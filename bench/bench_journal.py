#!/usr/bin/env python3
"""Retention journal cost: publication flat with history; opening and verifying.

Two measurements, each against a baseline taken in the same run:

1. Publication throughput with history. `journal.publish_reference(claim,
   owner.publisher(memory, tx), transaction_id=tx)` with an `InMemoryOwner`:
   each publish re-verifies the artifact (a stored 25 kB text, read and
   hashed), saves PREPARED to the SQLite store (WAL, synchronous=FULL: one
   commit, one fdatasync), appends its journal line and fsyncs it, calls the
   owner, then saves COMMITTED and appends + fsyncs its line. It is timed over
   `--publishes` (200) publishes on a session holding 1,000 prior lease events
   and on one holding `--history` (100,000) of them; the table gives
   publishes/s for both and 100k/1k, which should be ~1.0 ("flat, not growing
   with history"; ok at >= 0.8).
   Baseline: a fresh SQLite file in WAL mode with `PRAGMA synchronous=FULL`,
   one ~200-byte row INSERT + COMMIT per op, 2 x publishes ops (a publish makes
   two store commits). A publish costs two store commits plus two journal
   append+fsyncs, i.e. ~4 durable writes (strace shows exactly 2 fdatasync,
   SQLite's WAL commits, and 2 fsync, the journal's, per publish), so the
   table compares publishes/s with the baseline's ops/s / 4: a ratio near 1.0
   means a publish costs about four durable writes and little else; below 1.0
   is Python/store overhead. p50/p99 are over every timed publish of every
   round.

   The history is built fast and honestly: Lease aggregates made with
   `Lease.prepare(...)` + `.commit(...)` (valid claims on the one stored
   artifact, distinct transaction ids), 500 per `session.store.
   save_aggregates(*leases)` call, so 1,000 lease events per SQLite commit and
   every lease stays live (committed, no expiry). The session is then opened
   once with `open_session` (which catches up the journal and folds and saves
   the lease view) and closed; that state is kept as a template. Each round
   copies the template to the same path (fsyncing the copy, so no dirty page
   cache is flushed inside a timed fsync), opens it with a fresh
   `open_session` (timed, for information: the view and journal checkpoint
   are saved, so this open should not depend on the history), publishes
   WARMUP_PUBLISHES untimed (the first one's latency is shown), then times the
   publishes one by one. Every round thus starts from exactly 1k or 100k lease
   events. The lease view is saved every SAVE_EVERY folded events; with the
   default 200 publishes (400 events) no periodic save falls in the timed
   window, so the close (which saves it) is timed for information.
2. Opening and verifying a session with `--history` lease events. (a) First
   `open_session` of a session whose lease events were written straight to
   the store (journal empty, no saved view): it runs the artifact recovery
   pass, catches up the whole journal (every record projected, then written
   in one append + fsync) and folds the whole view, saved at the end of the
   catch-up. (b) A second `open_session` after closing it: the view and its
   journal checkpoint are saved, so besides the recovery pass it should only
   read the view and the journal's last line. (c) `session.journal.verify()`:
   whole-journal verification (every line decoded, chain checked, compared
   with the record projected from the stored event at its position).
   Baseline for (a) and (c): reading the whole journal file and hashing it
   with hashlib.sha256, a naive full read (page cache warm, like the journal
   (c) reads). Each round starts from a fresh, fsynced copy of the store-only
   session.

`--rounds` (3) rounds of each; in (1) the order of the 1k, 100k and SQLite
runs alternates between rounds. Medians are shown, and ratios are also given
as the median of per-round ratios (the disk's speed drifts on a shared host).
`--profile` profiles (b) and (c) once more after the timed rounds with cProfile
and prints the top entries.

Run from the repository root:

    .venv/bin/python bench/bench_journal.py
    .venv/bin/python bench/bench_journal.py --quick         # history 10k, 50 publishes
    .venv/bin/python bench/bench_journal.py --history 20000 --publishes 500
    .venv/bin/python bench/bench_journal.py --profile --dir /some/disk

Everything goes in a temp dir under `--dir` (default: the system temp dir),
which is removed. fsync figures mean nothing on tmpfs; the header names the
file system.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import io
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata

from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.services.lease_projection import SAVE_EVERY, session_projection
from spillvault.adapters.session import open_session
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactLeasePhase, ArtifactReferencePresence
from spillvault.domain.lease import Lease
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactMemoryReference,
    ArtifactRetentionClaim,
)

from hostfacts import fs_type, load_average

MB = 1000 * 1000
SMALL_HISTORY = 1000
DEFAULT_HISTORY = 100_000
DEFAULT_PUBLISHES = 200
QUICK_HISTORY = 10_000
QUICK_PUBLISHES = 50
DEFAULT_ROUNDS = 3
BATCH_LEASES = 500  # leases (2 events each) per save_aggregates call
WARMUP_PUBLISHES = 5
SQLITE_WARMUP = 20
STORE_COMMITS_PER_PUBLISH = 2
DURABLE_WRITES_PER_PUBLISH = 4  # 2 store commits + 2 journal append+fsync
FLAT_TARGET = 0.8
PROFILE_TOP = 15
SESSION_NAME = "bench-journal-session"
ARTIFACT_TEXT = "text\n" * 5000
ROW = "x" * 200


# ------------------------------------------------------------------ host facts


def version_of(package: str) -> str:
    """The installed version of `package`, or "unknown"."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class Fixture:
    """A session with a given lease history, kept as templates to copy from."""

    label: str
    path: str
    """Where every round's copy lives (always the same path)."""
    raw: str
    """Template: the lease events in the store only (journal empty, no view)."""
    primed: str
    """Template: after one open_session + close (journal caught up, view saved)."""
    lease_events: int
    memory: ArtifactMemoryReference
    claim: ArtifactRetentionClaim
    build_seconds: float
    prime_seconds: float


def fsync_tree(root: str) -> None:
    """fsync every file and directory under `root`, and `root`'s parent."""
    for here, _dirs, files in os.walk(root):
        for name in [*files, "."]:
            fd = os.open(os.path.join(here, name), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(os.path.dirname(root), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def restore(template: str, path: str) -> None:
    """Replace the session at `path` by a durable copy of `template`."""
    # Closed sessions must be gone first: the session lock is found by the
    # directory's inode, which the copy may reuse.
    gc.collect()
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(template, path, symlinks=True)
    fsync_tree(path)


def build_history(
    path: str, lease_events: int
) -> tuple[ArtifactMemoryReference, ArtifactRetentionClaim]:
    """Create a session with one artifact and `lease_events` lease events."""
    with open_session(path) as session:
        reference = session.externalizer.externalize(ARTIFACT_TEXT, "bash").artifact
        memory = reference.for_memory()
        claim = ArtifactRetentionClaim.from_memory_reference(memory)
        now = session.clock.now()
        total = lease_events // 2
        for first in range(0, total, BATCH_LEASES):
            leases = []
            for number in range(first, min(first + BATCH_LEASES, total)):
                transaction = ArtifactLeaseTransaction(
                    f"history-{number:08d}", claim, now
                )
                lease = Lease.prepare(transaction)
                lease.commit(now)
                leases.append(lease)
            session.store.save_aggregates(*leases)
    return memory, claim


def make_fixture(root: str, label: str, lease_events: int) -> Fixture:
    """Build a history, keep it raw, open it once, keep it primed."""
    path = os.path.join(root, "work", label, SESSION_NAME)
    os.makedirs(os.path.dirname(path), mode=0o700)
    started = time.perf_counter()
    memory, claim = build_history(path, lease_events)
    built = time.perf_counter() - started
    raw = os.path.join(root, "templates", f"raw-{label}", SESSION_NAME)
    primed = os.path.join(root, "templates", f"primed-{label}", SESSION_NAME)
    shutil.copytree(path, raw, symlinks=True)
    gc.collect()
    started = time.perf_counter()
    open_session(path).close()
    prime_seconds = time.perf_counter() - started
    shutil.copytree(path, primed, symlinks=True)
    return Fixture(
        label=label,
        path=path,
        raw=raw,
        primed=primed,
        lease_events=lease_events // 2 * 2,
        memory=memory,
        claim=claim,
        build_seconds=built,
        prime_seconds=prime_seconds,
    )


# ------------------------------------------------------ 1. publish throughput


@dataclass(frozen=True)
class PublishRun:
    """One round's publishes on one fixture."""

    open_seconds: float
    first_ms: float
    latencies: list[float]
    close_seconds: float

    @property
    def seconds(self) -> float:
        """Time of the timed publishes."""
        return sum(self.latencies)

    @property
    def rate(self) -> float:
        """Publishes per second."""
        return len(self.latencies) / self.seconds


def publish_round(fixture: Fixture, publishes: int, round_no: int) -> PublishRun:
    """Publish on a fresh copy of the primed session; time open, each publish."""
    restore(fixture.primed, fixture.path)
    owner = InMemoryOwner()
    started = time.perf_counter()
    session = open_session(fixture.path)
    opened = time.perf_counter() - started
    try:
        journal = session.journal
        ids = [f"publish-{round_no}-{i:06d}" for i in range(WARMUP_PUBLISHES)]
        ids += [f"publish-{round_no}-timed-{i:06d}" for i in range(publishes)]
        latencies = []
        for tx in ids:
            began = time.perf_counter()
            journal.publish_reference(
                fixture.claim, owner.publisher(fixture.memory, tx), transaction_id=tx
            )
            latencies.append(time.perf_counter() - began)
        expected = fixture.lease_events + 2 * len(ids)
        checkpoint = session_projection(session).checkpoint
        assert checkpoint.sequence == expected, (checkpoint, expected)
        lease = session.store.get_lease(ids[-1])
        assert lease.phase is ArtifactLeasePhase.COMMITTED, lease.phase
        with owner.inspect_fenced(lease.transaction) as fence:
            presence = fence.observation.presence
        assert presence is ArtifactReferencePresence.PUBLISHED, presence
        started = time.perf_counter()
    finally:
        session.close()
    closed = time.perf_counter() - started
    return PublishRun(
        open_seconds=opened,
        first_ms=latencies[0] * 1e3,
        latencies=latencies[WARMUP_PUBLISHES:],
        close_seconds=closed,
    )


def sqlite_round(root: str, ops: int, round_no: int) -> float:
    """Time `ops` one-row INSERT + COMMITs into a fresh WAL, synchronous=FULL file."""
    path = os.path.join(root, f"baseline-{round_no}.sqlite3")
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("CREATE TABLE ops (id INTEGER PRIMARY KEY, payload TEXT)")
        for _ in range(SQLITE_WARMUP):
            insert_commit(connection)
        started = time.perf_counter()
        for _ in range(ops):
            insert_commit(connection)
        return time.perf_counter() - started
    finally:
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)


def insert_commit(connection: sqlite3.Connection) -> None:
    """One durable op: BEGIN, INSERT one small row, COMMIT."""
    connection.execute("BEGIN")
    connection.execute("INSERT INTO ops (payload) VALUES (?)", (ROW,))
    connection.execute("COMMIT")


@dataclass
class PublishTimes:
    """Every round of (1)."""

    small: list[PublishRun]
    large: list[PublishRun]
    sqlite: list[float]


def publish_rounds(
    root: str, small: Fixture, large: Fixture, publishes: int, rounds: int
) -> PublishTimes:
    """Run (1)'s rounds, alternating the order of the three contenders."""
    times = PublishTimes([], [], [])
    ops = publishes * STORE_COMMITS_PER_PUBLISH
    contenders = [
        lambda r: times.small.append(publish_round(small, publishes, r)),
        lambda r: times.large.append(publish_round(large, publishes, r)),
        lambda r: times.sqlite.append(sqlite_round(root, ops, r)),
    ]
    for round_no in range(rounds):
        order = contenders if round_no % 2 == 0 else contenders[::-1]
        for run in order:
            run(round_no)
    return times


# ------------------------------------------------- 2. opening and verifying


@dataclass(frozen=True)
class OpenRun:
    """One round of (2)."""

    first_open: float
    first_close: float
    second_open: float
    verify: float
    records: int
    journal_bytes: int
    hash_seconds: float


def hash_file(path: str) -> float:
    """Read the whole file and SHA-256 it (the naive full read); seconds."""
    started = time.perf_counter()
    with open(path, "rb") as handle:
        data = handle.read()
    hashlib.sha256(data).hexdigest()
    return time.perf_counter() - started


def open_round(fixture: Fixture, round_no: int) -> OpenRun:
    """First open of the store-only copy, close, the baseline, second open, verify."""
    restore(fixture.raw, fixture.path)
    journal_path = os.path.join(fixture.path, RETENTION_JOURNAL_NAME)
    assert not os.path.exists(journal_path)
    started = time.perf_counter()
    session = open_session(fixture.path)
    first_open = time.perf_counter() - started
    started = time.perf_counter()
    session.close()
    first_close = time.perf_counter() - started
    hash_seconds = hash_file(journal_path) if round_no % 2 == 0 else 0.0
    started = time.perf_counter()
    session = open_session(fixture.path)
    second_open = time.perf_counter() - started
    try:
        started = time.perf_counter()
        report = session.journal.verify()
        verify = time.perf_counter() - started
    finally:
        session.close()
    if round_no % 2 == 1:
        hash_seconds = hash_file(journal_path)
    assert report.records == fixture.lease_events, report
    assert report.torn_bytes == 0, report
    return OpenRun(
        first_open=first_open,
        first_close=first_close,
        second_open=second_open,
        verify=verify,
        records=report.records,
        journal_bytes=os.path.getsize(journal_path),
        hash_seconds=hash_seconds,
    )


def profile_open_verify(fixture: Fixture) -> None:
    """Profile one second open and one verify of the primed session; print tops."""
    restore(fixture.primed, fixture.path)
    for what in ("second open_session", "journal.verify()"):
        profiler = cProfile.Profile()
        if what.startswith("second"):
            profiler.enable()
            session = open_session(fixture.path)
            profiler.disable()
            session.close()
        else:
            session = open_session(fixture.path)
            try:
                profiler.enable()
                session.journal.verify()
                profiler.disable()
            finally:
                session.close()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.strip_dirs().sort_stats("cumulative").print_stats(PROFILE_TOP)
        print(f"\ncProfile, {what}, {short(fixture.lease_events)} lease events:")
        lines = out.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "ncalls" in line)
        total = next((line for line in lines if "function calls" in line), "")
        print(total.strip())
        print("\n".join(line for line in lines[start:] if line.strip()))


# ------------------------------------------------------------------- report

Row = tuple[str, str, str, str, str]


def verdict(*, ok: bool) -> str:
    """Say whether a target was met."""
    return "ok" if ok else "MISSED"


def median_of(runs: list[PublishRun], attr: str) -> float:
    """Median of one float attribute over the runs."""
    return statistics.median(getattr(run, attr) for run in runs)


def percentile_ms(runs: list[PublishRun], fraction: float) -> float:
    """A latency percentile (ms) over every timed publish of every round."""
    values = sorted(value for run in runs for value in run.latencies)
    return values[min(len(values) - 1, int(fraction * len(values)))] * 1e3


def short(count: int) -> str:
    """1000 -> 1k, 100000 -> 100k."""
    return f"{count // 1000}k" if count % 1000 == 0 and count >= 1000 else f"{count}"


def publish_table(
    times: PublishTimes, small: Fixture, large: Fixture, publishes: int
) -> tuple[list[Row], list[str]]:
    """Rows of (1) and its notes."""
    ops = publishes * STORE_COMMITS_PER_PUBLISH
    sqlite_rate = ops / statistics.median(times.sqlite)
    per_four = sqlite_rate / DURABLE_WRITES_PER_PUBLISH
    baseline = f"sqlite commit {sqlite_rate:,.0f} ops/s; /4 = {per_four:,.0f}/s"
    tag = {
        small.label: short(small.lease_events),
        large.label: short(large.lease_events),
    }
    rows: list[Row] = []
    rates = {}
    for fixture, runs in ((small, times.small), (large, times.large)):
        rate = publishes / statistics.median(run.seconds for run in runs)
        rates[fixture.label] = rate
        per_round = statistics.median(
            run.rate / (ops / sqlite / DURABLE_WRITES_PER_PUBLISH)
            for run, sqlite in zip(runs, times.sqlite, strict=True)
        )
        case = f"1 publish_reference, {tag[fixture.label]} prior lease events"
        p50, p99 = percentile_ms(runs, 0.5), percentile_ms(runs, 0.99)
        value = f"{rate:,.0f} publishes/s (p50 {p50:.2f} ms, p99 {p99:.2f} ms)"
        ratio = f"{rate / per_four:.2f}x of /4 (per-round {per_round:.2f}x)"
        rows.append((case, value, baseline, ratio, "-"))
    flat = rates[large.label] / rates[small.label]
    per_round_flat = [
        big.rate / little.rate
        for big, little in zip(times.large, times.small, strict=True)
    ]
    rounds = " ".join(f"{r:.2f}" for r in per_round_flat)
    case = f"  flat: publishes/s {tag[large.label]} / {tag[small.label]}"
    ratio = f"per-round {statistics.median(per_round_flat):.2f} (rounds: {rounds})"
    target = f">= {FLAT_TARGET} {verdict(ok=flat >= FLAT_TARGET)}"
    rows.append((case, f"{flat:.2f}", "-", ratio, target))
    infos = (
        ("  info: open_session before publishing (view saved)", "open_seconds", 1e3),
        ("  info: first (untimed warm-up) publish", "first_ms", 1.0),
        ("  info: close after publishing (saves the view)", "close_seconds", 1e3),
    )
    for case, attr, scale in infos:
        lo = median_of(times.small, attr) * scale
        hi = median_of(times.large, attr) * scale
        value = f"{tag[small.label]} {lo:,.1f} ms, {tag[large.label]} {hi:,.1f} ms"
        ratio = f"{hi / lo:.2f}x ({tag[large.label]}/{tag[small.label]})"
        rows.append((case, value, "-", ratio, "-"))
    seconds = " ".join(
        f"{a.seconds:.3f}/{b.seconds:.3f}/{s:.3f}"
        for a, b, s in zip(times.small, times.large, times.sqlite, strict=True)
    )
    notes = [
        (
            f"(1) rounds, seconds of the timed publishes {tag[small.label]}/"
            f"{tag[large.label]}/SQLite baseline: {seconds}"
        ),
        (
            f"(1) a publish = 2 store commits + 2 journal append+fsync = "
            f"{DURABLE_WRITES_PER_PUBLISH} durable writes: the baseline column "
            f"divides the SQLite ops/s ({ops} ops a round) by "
            f"{DURABLE_WRITES_PER_PUBLISH}, the ratio is publishes/s over that"
        ),
        (
            f"(1) history built in {small.build_seconds:.2f} s / "
            f"{large.build_seconds:.2f} s ({BATCH_LEASES} leases per save); priming "
            f"open+close {small.prime_seconds:.2f} s / {large.prime_seconds:.2f} s; "
            f"the view is saved every {SAVE_EVERY} folded events, the timed window "
            f"holds {2 * publishes} after {2 * WARMUP_PUBLISHES} warm-up ones"
        ),
    ]
    return rows, notes


def open_table(runs: list[OpenRun], fixture: Fixture) -> tuple[list[Row], list[str]]:
    """Rows of (2) and its notes."""
    first = statistics.median(run.first_open for run in runs)
    second = statistics.median(run.second_open for run in runs)
    verify = statistics.median(run.verify for run in runs)
    hashed = statistics.median(run.hash_seconds for run in runs)
    size = runs[-1].journal_bytes
    records = runs[-1].records
    label = short(fixture.lease_events)
    baseline = (
        f"read+sha256 of the journal {hashed * 1e3:,.1f} ms "
        f"({size / MB / hashed:,.0f} MB/s)"
    )
    per_first = statistics.median(r.first_open / r.hash_seconds for r in runs)
    per_verify = statistics.median(r.verify / r.hash_seconds for r in runs)
    rows: list[Row] = [
        (
            f"2a first open_session, {label} lease events, journal empty",
            f"{first:,.2f} s ({records / first:,.0f} events/s)",
            baseline,
            f"{first / hashed:,.0f}x slower (per-round {per_first:,.0f}x)",
            "-",
        ),
        (
            "2b second open_session (view + checkpoint saved)",
            f"{second * 1e3:,.1f} ms",
            f"2a: {first * 1e3:,.0f} ms",
            f"{second / first:.3f} of 2a; {second / hashed:,.1f}x read+sha256",
            "-",
        ),
        (
            "2c session.journal.verify() (whole journal)",
            f"{verify:,.2f} s ({records / verify:,.0f} records/s)",
            baseline,
            f"{verify / hashed:,.0f}x slower (per-round {per_verify:,.0f}x)",
            "-",
        ),
        (
            "   journal size",
            f"{size / MB:,.1f} MB, {records:,} records, {size / records:.0f} B/record",
            "-",
            "-",
            "-",
        ),
    ]
    notes = [
        "(2) rounds, seconds first open/close/second open/verify/read+sha256: "
        + " ".join(
            f"{r.first_open:.2f}/{r.first_close:.3f}/{r.second_open:.3f}/"
            f"{r.verify:.2f}/{r.hash_seconds:.3f}"
            for r in runs
        ),
    ]
    return rows, notes


def print_table(rows: list[Row]) -> None:
    """Print rows under a header, columns padded."""
    headers = ("case", "spillvault", "baseline (same run)", "ratio", "target")
    table = [headers, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for row in table:
        cells = zip(row, widths, strict=True)
        print("  ".join(cell.ljust(width) for cell, width in cells).rstrip())


# --------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--history",
        type=int,
        default=None,
        help=f"lease events of the large session ({DEFAULT_HISTORY:,}; "
        f"--quick: {QUICK_HISTORY:,})",
    )
    parser.add_argument(
        "--publishes",
        type=int,
        default=None,
        help=f"timed publishes per round ({DEFAULT_PUBLISHES}; "
        f"--quick: {QUICK_PUBLISHES})",
    )
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds of (1) and (2)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: history {QUICK_HISTORY:,}, {QUICK_PUBLISHES} publishes",
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile (2b) and (2c) once more"
    )
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    args = parser.parse_args(argv)
    if args.history is None:
        args.history = QUICK_HISTORY if args.quick else DEFAULT_HISTORY
    if args.publishes is None:
        args.publishes = QUICK_PUBLISHES if args.quick else DEFAULT_PUBLISHES
    if args.history < 2 or args.publishes < 1 or args.rounds < 1:
        parser.error("--history must be >= 2, --publishes and --rounds >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Build the fixtures, run both measurements, print the table, clean up."""
    args = parse_args(argv)
    root = tempfile.mkdtemp(prefix="spillvault-bench-", dir=args.dir)
    try:
        return bench(root, args)
    finally:
        gc.collect()
        shutil.rmtree(root, ignore_errors=True)


def bench(root: str, args: argparse.Namespace) -> int:
    """Measure everything under `root` and print the table."""
    kind = fs_type(root)
    started = time.perf_counter()
    print(
        f"python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load {load_average()}; "
        f"SQLite {sqlite3.sqlite_version}, eventsourcing "
        f"{version_of('eventsourcing')}; temp dir {root} ({kind})"
    )
    if kind in {"tmpfs", "ramfs"}:
        print("WARNING: fsync is a no-op on this file system; use --dir")
    small = make_fixture(root, "small", min(SMALL_HISTORY, args.history))
    large = make_fixture(root, "large", args.history)
    print(
        f"lease events: {small.lease_events:,} and {large.lease_events:,} "
        f"({large.lease_events // 2:,} live leases); {args.publishes} timed "
        f"publishes after {WARMUP_PUBLISHES} warm-up ones; median of "
        f"{args.rounds} rounds, order alternating; fixtures ready in "
        f"{time.perf_counter() - started:.1f} s"
    )
    times = publish_rounds(root, small, large, args.publishes, args.rounds)
    opens = [open_round(large, round_no) for round_no in range(args.rounds)]

    rows, notes = publish_table(times, small, large, args.publishes)
    open_rows, open_notes = open_table(opens, large)
    print()
    print_table(rows + open_rows)
    print()
    for note in notes + open_notes:
        print(note)
    if args.profile:
        profile_open_verify(large)
    print(f"total {time.perf_counter() - started:.0f} s; load now {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
