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
   round. An info row times those four durable writes alone, interleaved as
   a publish makes them (the baseline's INSERT + COMMIT, an append + fsync
   of a 431-byte line to a second file, both again) and gives publishes/s
   as a fraction of that rate: what no code around the writes can beat.

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
   (c) reads), interleaved with (a)-(c): after them in one round, before them
   (on the journal the round before left) in the next. Each round starts from
   a fresh, fsynced copy of the store-only session. Targets: (a) under
   0.5 s, (c) at least 150k records/s. The floor under both, also timed in
   each round on the session (c) verified: the event store's own bulk read
   of every event (`store.notifications()`, eventsourcing's
   `select_notifications` a page at a time), which (a) and (c) cannot avoid.
   (d) A first `open_session` of a session whose view and journal checkpoint
   were saved at `--history` lease events, after which `LATE_EVENTS` (1,000)
   more were written to the store only: it should cost what the late events
   cost, not the history (O(new events)); 2b is its baseline.

`--rounds` (3) rounds of each; the order of the contenders (in (1) the 1k,
100k, SQLite and durable-writes runs) alternates between rounds. Medians are
shown, and ratios are also given as the median of per-round ratios (the disk's
speed drifts on a shared host).
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
import os
import shutil
import sqlite3
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.services.lease_projection import SAVE_EVERY, session_projection
from spillvault.adapters.session import Session, open_session
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactLeasePhase, ArtifactReferencePresence
from spillvault.domain.lease import Lease
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactMemoryReference,
    ArtifactRetentionClaim,
)

from harness import (
    CASE_HEADERS,
    MB,
    insert_commit,
    interleave,
    print_footer,
    print_host,
    print_profile,
    print_table,
    ratio,
    restore,
    round_by_round,
    run_in_temp_dir,
    verdict,
    version_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from spillvault.adapters.session import ArtifactRetentionJournal

    from harness import Lap, Rounds

SMALL_HISTORY = 1000
DEFAULT_HISTORY = 100_000
DEFAULT_PUBLISHES = 200
QUICK_HISTORY = 10_000
QUICK_PUBLISHES = 50
DEFAULT_ROUNDS = 3
BATCH_LEASES = 500  # leases (2 events each) per save_aggregates call
WARMUP_PUBLISHES = 5
SQLITE_WARMUP = 20
LATE_EVENTS = 1000  # lease events written after the checkpoint, for (2d)
FIRST_OPEN_TARGET = 0.5  # seconds, (2a)
VERIFY_TARGET = 150_000  # records/s, (2c)
STORE_COMMITS_PER_PUBLISH = 2
DURABLE_WRITES_PER_PUBLISH = 4  # 2 store commits + 2 journal append+fsync
FLAT_TARGET = 0.8
PROFILE_TOP = 15
SESSION_NAME = "bench-journal-session"
ARTIFACT_TEXT = "text\n" * 5000
JOURNAL_LINE = b"x" * 430 + b"\n"  # about a lease record's line


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
    late: str
    """Template: `primed` plus LATE_EVENTS lease events in the store only."""
    lease_events: int
    memory: ArtifactMemoryReference
    claim: ArtifactRetentionClaim
    build_seconds: float
    prime_seconds: float


def build_history(
    path: str, lease_events: int
) -> tuple[ArtifactMemoryReference, ArtifactRetentionClaim]:
    """Create a session with one artifact and `lease_events` lease events."""
    with open_session(path) as session:
        reference = session.externalizer.externalize(ARTIFACT_TEXT, "bash").artifact
        memory = reference.for_memory()
        claim = ArtifactRetentionClaim.from_memory_reference(memory)
        store_leases(session, claim, "history", lease_events)
    return memory, claim


def store_leases(
    session: Session, claim: ArtifactRetentionClaim, tag: str, lease_events: int
) -> None:
    """Save `lease_events` / 2 committed leases straight to the store."""
    now = session.clock.now()
    total = lease_events // 2
    for first in range(0, total, BATCH_LEASES):
        leases = []
        for number in range(first, min(first + BATCH_LEASES, total)):
            transaction = ArtifactLeaseTransaction(f"{tag}-{number:08d}", claim, now)
            lease = Lease.prepare(transaction)
            lease.commit(now)
            leases.append(lease)
        session.store.save_aggregates(*leases)


def make_fixture(root: str, label: str, lease_events: int) -> Fixture:
    """Build a history, keep it raw, open it once, keep it primed, add late events."""
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
    late = os.path.join(root, "templates", f"late-{label}", SESSION_NAME)
    with open_session(path) as session:
        # Straight to the store, past the projection: the view stays saved at
        # the checkpoint and the journal ends there.
        store_leases(session, claim, "late", LATE_EVENTS)
    shutil.copytree(path, late, symlinks=True)
    return Fixture(
        label=label,
        path=path,
        raw=raw,
        primed=primed,
        late=late,
        lease_events=lease_events // 2 * 2,
        memory=memory,
        claim=claim,
        build_seconds=built,
        prime_seconds=prime_seconds,
    )


# ------------------------------------------------------ 1. publish throughput


@dataclass
class PublishRuns:
    """What the rounds of (1) leave besides their times, per fixture."""

    first_ms: list[float] = field(default_factory=list)
    """The first (untimed warm-up) publish of each round."""
    latencies: list[float] = field(default_factory=list)
    """Every timed publish of every round, seconds."""


def publish_round(
    fixture: Fixture, publishes: int, runs: PublishRuns
) -> Callable[[Lap], None]:
    """A contender: publish on a fresh copy of the primed session.

    Sections: "open", "close", and the timed publishes (main), each also
    timed alone for the latency percentiles.
    """

    def call(lap: Lap) -> None:
        restore(fixture.primed, fixture.path)
        owner = InMemoryOwner()
        with lap.time("open"):
            session = open_session(fixture.path)
        try:
            journal = session.journal
            tag = f"publish-{lap.round_no}"
            warmup = [f"{tag}-{i:06d}" for i in range(WARMUP_PUBLISHES)]
            timed = [f"{tag}-timed-{i:06d}" for i in range(publishes)]
            latencies = [publish(journal, owner, fixture, tx) for tx in warmup]
            with lap.time():
                latencies += [publish(journal, owner, fixture, tx) for tx in timed]
            expected = fixture.lease_events + 2 * (len(warmup) + len(timed))
            checkpoint = session_projection(session).checkpoint
            assert checkpoint.sequence == expected, (checkpoint, expected)
            lease = session.store.get_lease(timed[-1])
            assert lease.phase is ArtifactLeasePhase.COMMITTED, lease.phase
            with owner.inspect_fenced(lease.transaction) as fence:
                presence = fence.observation.presence
            assert presence is ArtifactReferencePresence.PUBLISHED, presence
        finally:
            with lap.time("close"):
                session.close()
        runs.first_ms.append(latencies[0] * 1e3)
        runs.latencies += latencies[WARMUP_PUBLISHES:]

    return call


def publish(
    journal: ArtifactRetentionJournal, owner: InMemoryOwner, fixture: Fixture, tx: str
) -> float:
    """One publish_reference; its seconds."""
    began = time.perf_counter()
    journal.publish_reference(
        fixture.claim, owner.publisher(fixture.memory, tx), transaction_id=tx
    )
    return time.perf_counter() - began


def sqlite_round(root: str, ops: int) -> Callable[[Lap], None]:
    """A contender: `ops` one-row INSERT + COMMITs, WAL, synchronous=FULL."""

    def call(lap: Lap) -> None:
        path = os.path.join(root, f"baseline-{lap.round_no}.sqlite3")
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.execute(
                "CREATE TABLE ops (id INTEGER PRIMARY KEY, payload TEXT)"
            )
            for _ in range(SQLITE_WARMUP):
                insert_commit(connection)
            with lap.time():
                for _ in range(ops):
                    insert_commit(connection)
        finally:
            connection.close()
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)

    return call


def writes_round(root: str, publishes: int) -> Callable[[Lap], None]:
    """A contender: a publish's durable writes alone, `publishes` times.

    Each time: the baseline's INSERT + COMMIT, an append + fsync of a
    journal-sized line to another file, and both once more: the four
    durable writes of a publish, interleaved as a publish interleaves them.
    """

    def call(lap: Lap) -> None:
        path = os.path.join(root, f"writes-{lap.round_no}.sqlite3")
        journal = os.path.join(root, f"writes-{lap.round_no}.jsonl")
        connection = sqlite3.connect(path, isolation_level=None)
        fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.execute(
                "CREATE TABLE ops (id INTEGER PRIMARY KEY, payload TEXT)"
            )
            for _ in range(SQLITE_WARMUP):
                insert_commit(connection)
            with lap.time():
                for _ in range(publishes * STORE_COMMITS_PER_PUBLISH):
                    insert_commit(connection)
                    os.write(fd, JOURNAL_LINE)
                    os.fsync(fd)
        finally:
            os.close(fd)
            connection.close()
            for name in (path, path + "-wal", path + "-shm", journal):
                if os.path.exists(name):
                    os.unlink(name)

    return call


def publish_rounds(
    root: str, small: Fixture, large: Fixture, publishes: int, rounds: int
) -> tuple[Rounds, dict[str, PublishRuns]]:
    """Run (1)'s rounds, alternating the order of the three contenders."""
    runs = {small.label: PublishRuns(), large.label: PublishRuns()}
    contenders = {
        small.label: publish_round(small, publishes, runs[small.label]),
        large.label: publish_round(large, publishes, runs[large.label]),
        "sqlite": sqlite_round(root, publishes * STORE_COMMITS_PER_PUBLISH),
        "writes": writes_round(root, publishes),
    }
    return interleave(contenders, rounds), runs


# ------------------------------------------------- 2. opening and verifying


OPEN_SECTIONS = ("first_open", "first_close", "second_open", "verify", "store_read")


@dataclass
class JournalFacts:
    """The journal (2) verified: its records and size."""

    records: int = 0
    size: int = 0


def open_round(fixture: Fixture, facts: JournalFacts) -> Callable[[Lap], None]:
    """A contender: first open of the store-only copy, close, second open, verify."""
    journal_path = os.path.join(fixture.path, RETENTION_JOURNAL_NAME)

    def call(lap: Lap) -> None:
        restore(fixture.raw, fixture.path)
        assert not os.path.exists(journal_path)
        with lap.time("first_open"):
            session = open_session(fixture.path)
        with lap.time("first_close"):
            session.close()
        with lap.time("second_open"):
            session = open_session(fixture.path)
        try:
            with lap.time("verify"):
                report = session.journal.verify()
            with lap.time("store_read"):
                events = sum(1 for _ in session.store.notifications(after=0))
        finally:
            session.close()
        assert events > fixture.lease_events, events
        assert report.records == fixture.lease_events, report
        assert report.torn_bytes == 0, report
        facts.records = report.records
        facts.size = os.path.getsize(journal_path)

    return call


def late_open_round(fixture: Fixture) -> Callable[[Lap], None]:
    """A contender: first open of the copy checkpointed before LATE_EVENTS events."""

    def call(lap: Lap) -> None:
        restore(fixture.late, fixture.path)
        with lap.time():
            session = open_session(fixture.path)
        try:
            checkpoint = session_projection(session).checkpoint
        finally:
            session.close()
        expected = fixture.lease_events + LATE_EVENTS
        assert checkpoint.sequence == expected, (checkpoint, expected)

    return call


def hash_file(path: str) -> Callable[[Lap], None]:
    """A contender: read the whole file and SHA-256 it (the naive full read)."""

    def call(lap: Lap) -> None:
        with lap.time():
            with open(path, "rb") as handle:
                data = handle.read()
            hashlib.sha256(data).hexdigest()

    return call


def open_rounds(fixture: Fixture, rounds: int) -> tuple[Rounds, JournalFacts]:
    """Run (2)'s rounds, the full read before (a)-(c) or after them, alternating."""
    facts = JournalFacts()
    # The first round runs "open" first: the journal the read hashes exists
    # from then on (each later round reads the one the round before left).
    contenders = {
        "open": open_round(fixture, facts),
        "hash": hash_file(os.path.join(fixture.path, RETENTION_JOURNAL_NAME)),
        "late": late_open_round(fixture),
    }
    return interleave(contenders, rounds), facts


def profile_open_verify(fixture: Fixture) -> None:
    """Profile one second open and one verify of the primed session; print tops."""
    label = f"{short(fixture.lease_events)} lease events"
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
        print_profile(profiler, f"{what}, {label}", PROFILE_TOP, ("cumulative",))


# ------------------------------------------------------------------- report

Row = tuple[str, str, str, str, str]


def percentile_ms(latencies: list[float], fraction: float) -> float:
    """A latency percentile (ms) over every timed publish of every round."""
    values = sorted(latencies)
    return values[min(len(values) - 1, int(fraction * len(values)))] * 1e3


def short(count: int) -> str:
    """1000 -> 1k, 100000 -> 100k."""
    return f"{count // 1000}k" if count % 1000 == 0 and count >= 1000 else f"{count}"


def publish_table(
    times: Rounds,
    runs: dict[str, PublishRuns],
    fixtures: tuple[Fixture, Fixture],
    publishes: int,
) -> tuple[list[Row], list[str]]:
    """Rows of (1) and its notes."""
    small, large = fixtures
    ops = publishes * STORE_COMMITS_PER_PUBLISH
    sqlite_rate = ops / times.stats("sqlite").median
    per_four = sqlite_rate / DURABLE_WRITES_PER_PUBLISH
    baseline = f"sqlite commit {sqlite_rate:,.0f} ops/s; /4 = {per_four:,.0f}/s"
    tag = {
        small.label: short(small.lease_events),
        large.label: short(large.lease_events),
    }
    rows: list[Row] = []
    rates = {}
    for fixture in fixtures:
        label = fixture.label
        rate = publishes / times.stats(label).median
        rates[label] = rate
        # publishes/s over (sqlite ops/s / 4) is a time ratio, scaled.
        scale = publishes * DURABLE_WRITES_PER_PUBLISH / ops
        per_round = times.ratio("sqlite", label).scaled(scale).per_round
        case = f"1 publish_reference, {tag[label]} prior lease events"
        latencies = runs[label].latencies
        p50, p99 = percentile_ms(latencies, 0.5), percentile_ms(latencies, 0.99)
        value = f"{rate:,.0f} publishes/s (p50 {p50:.2f} ms, p99 {p99:.2f} ms)"
        ratio_text = f"{rate / per_four:.2f}x of /4 (per-round {per_round:.2f}x)"
        rows.append((case, value, baseline, ratio_text, "-"))
    rows.append(writes_row(times, publishes, per_four, tag))
    flat = rates[large.label] / rates[small.label]
    per_round_flat = times.ratio(small.label, large.label)
    rounds = " ".join(f"{r:.2f}" for r in per_round_flat.rounds)
    case = f"  flat: publishes/s {tag[large.label]} / {tag[small.label]}"
    ratio_text = f"per-round {per_round_flat.per_round:.2f} (rounds: {rounds})"
    target = f">= {FLAT_TARGET} {verdict(ok=flat >= FLAT_TARGET)}"
    rows.append((case, f"{flat:.2f}", "-", ratio_text, target))
    infos = {
        "  info: open_session before publishing (view saved)": {
            label: times.stats(label, "open").median * 1e3 for label in tag
        },
        "  info: first (untimed warm-up) publish": {
            label: statistics.median(runs[label].first_ms) for label in tag
        },
        "  info: close after publishing (saves the view)": {
            label: times.stats(label, "close").median * 1e3 for label in tag
        },
    }
    for case, ms in infos.items():
        lo, hi = ms[small.label], ms[large.label]
        value = f"{tag[small.label]} {lo:,.1f} ms, {tag[large.label]} {hi:,.1f} ms"
        ratio_text = f"{hi / lo:.2f}x ({tag[large.label]}/{tag[small.label]})"
        rows.append((case, value, "-", ratio_text, "-"))
    seconds = round_by_round(
        times.seconds(small.label),
        times.seconds(large.label),
        times.seconds("sqlite"),
        times.seconds("writes"),
        specs=(".3f", ".3f", ".3f", ".3f"),
    )
    notes = [
        (
            f"(1) rounds, seconds of the timed publishes {tag[small.label]}/"
            f"{tag[large.label]}/SQLite baseline/durable writes alone: {seconds}"
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


def writes_row(
    times: Rounds, publishes: int, per_four: float, tag: dict[str, str]
) -> Row:
    """The info row of (1) on a publish's four durable writes timed alone."""
    rate = publishes / times.stats("writes").median
    # Time of the writes alone over time of the publishes: publishes/s over it.
    of_it = ", ".join(
        f"{short_label} {times.ratio('writes', label).per_round:.2f}x"
        for label, short_label in tag.items()
    )
    return (
        "  info: its 4 durable writes alone (2 commits, 2 append+fsync)",
        f"{rate:,.0f}/s ({rate / per_four:.2f}x of /4)",
        "-",
        f"publishes/s: {of_it} of it (per-round)",
        "-",
    )


def open_table(
    times: Rounds, facts: JournalFacts, fixture: Fixture
) -> tuple[list[Row], list[str]]:
    """Rows of (2) and its notes."""
    first = times.stats("open", "first_open").median
    second = times.stats("open", "second_open").median
    verify = times.stats("open", "verify").median
    floor = times.stats("open", "store_read").median
    late = times.stats("late").median
    hashed = times.stats("hash").median
    size = facts.size
    records = facts.records
    label = short(fixture.lease_events)
    baseline = (
        f"read+sha256 of the journal {hashed * 1e3:,.1f} ms "
        f"({size / MB / hashed:,.0f} MB/s)"
    )
    per_first = ratio(times.seconds("open", "first_open"), times.seconds("hash"))
    per_verify = ratio(times.seconds("open", "verify"), times.seconds("hash"))
    floor_of = {
        section: ratio(
            times.seconds("open", section), times.seconds("open", "store_read")
        ).per_round
        for section in ("first_open", "verify")
    }
    per_late = ratio(times.seconds("late"), times.seconds("open", "second_open"))
    rate = records / verify
    late_case = (
        f"2d first open_session, checkpoint at {label}, "
        f"+{short(LATE_EVENTS)} lease events in the store"
    )
    floor_ratios = (
        f"2a {floor_of['first_open']:.1f}x, 2c {floor_of['verify']:.1f}x it (per-round)"
    )
    rows: list[Row] = [
        (
            f"2a first open_session, {label} lease events, journal empty",
            f"{first:,.2f} s ({records / first:,.0f} events/s)",
            baseline,
            f"{first / hashed:,.0f}x slower (per-round {per_first.per_round:,.0f}x)",
            f"< {FIRST_OPEN_TARGET} s {verdict(ok=first < FIRST_OPEN_TARGET)}",
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
            f"{verify:,.2f} s ({rate:,.0f} records/s)",
            baseline,
            f"{verify / hashed:,.0f}x slower (per-round {per_verify.per_round:,.0f}x)",
            f">= {VERIFY_TARGET // 1000}k/s {verdict(ok=rate >= VERIFY_TARGET)}",
        ),
        (
            late_case,
            f"{late * 1e3:,.1f} ms",
            f"2b: {second * 1e3:,.1f} ms",
            f"{late / second:.2f}x 2b (per-round {per_late.per_round:.2f}x)",
            "-",
        ),
        (
            "   floor of 2a and 2c: the store's bulk read of every event",
            f"{floor:,.2f} s ({records / floor:,.0f} lease events/s)",
            "-",
            floor_ratios,
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
    columns = [times.seconds("open", section) for section in OPEN_SECTIONS]
    notes = [
        "(2) rounds, seconds first open/close/second open/verify/store read/"
        "read+sha256/2d open: "
        + round_by_round(
            *columns,
            times.seconds("hash"),
            times.seconds("late"),
            specs=(".2f", ".3f", ".3f", ".2f", ".2f", ".3f", ".3f"),
        ),
    ]
    return rows, notes


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
    return run_in_temp_dir(bench, args)


def bench(root: str, args: argparse.Namespace) -> int:
    """Measure everything under `root` and print the table."""
    started = time.perf_counter()
    print_host(
        root,
        f"SQLite {sqlite3.sqlite_version}, eventsourcing {version_of('eventsourcing')}",
    )
    small = make_fixture(root, "small", min(SMALL_HISTORY, args.history))
    large = make_fixture(root, "large", args.history)
    print(
        f"lease events: {small.lease_events:,} and {large.lease_events:,} "
        f"({large.lease_events // 2:,} live leases); {args.publishes} timed "
        f"publishes after {WARMUP_PUBLISHES} warm-up ones; median of "
        f"{args.rounds} rounds, order alternating; fixtures ready in "
        f"{time.perf_counter() - started:.1f} s"
    )
    times, runs = publish_rounds(root, small, large, args.publishes, args.rounds)
    opens, facts = open_rounds(large, args.rounds)

    rows, notes = publish_table(times, runs, (small, large), args.publishes)
    open_rows, open_notes = open_table(opens, facts, large)
    print()
    print_table(CASE_HEADERS, rows + open_rows)
    print()
    for note in notes + open_notes:
        print(note)
    if args.profile:
        profile_open_verify(large)
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
