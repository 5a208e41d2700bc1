#!/usr/bin/env python3
"""GC cost: plan throughput against openssl; apply throughput per 1,000 deletions.

Two measurements, each against baselines taken in the same run:

1. Plan throughput. A session holding `--artifacts` (10,000) artifacts of
   `--total-mb` (1,000 MB) in all (~100 KB each: log text with a unique first
   line, so every digest differs) is built once through
   `session.externalizer.store.store([bytes], source_tool="bash")`, which
   hashes each artifact, fsyncs the file and twice the directory, and records
   it (a number reservation and a `Stored` event, one SQLite commit each).
   That setup is timed and shown for information, with the mean cost of a
   store over the first and the last tenth (it grows with the number of
   artifacts already stored, so the default setup takes many minutes), as is
   reopening the built session (`open_session`, with its recovery pass).
   Then `plan_cleanup_from_journal(session, policy=..., now=...)` is timed
   with a dry-run policy (`orphan_ttl_seconds` one hour, `now` two days
   ahead), so every artifact is `planned_delete`: the plan verifies the
   retention journal whole (`verify_whole`: every stored event is read to
   project the lease records), lists `tool-results/`, and for each entry
   lstats it, loads its artifact from the SQLite store, opens it per A4,
   flocks it, hashes it whole (`hash_open_file`: 1 MiB preads into a
   `ContentHasher`, which also takes the per-MiB chunk digest, newline counts
   and first line) and classifies it. Each run checks the counts (all
   `planned_delete`, nothing else) and, for a fixed sample of about
   `SAMPLE_CHECKS` artifacts (every artifacts/`SAMPLE_CHECKS`-th name), that
   the plan's snapshot digest and size equal hashlib's over the file (itself
   checked against the recorded digest once).
   Baseline: `find tool-results -name 'tool_result_*' -print0 | xargs -0
   openssl dgst -sha256` over the same files (xargs batches the argv, so
   ARG_MAX is never hit; one openssl at a time, like the plan's one thread),
   its output checked: one digest per artifact, the sample's equal to
   hashlib's. `sha256sum` replaces openssl when it is missing, and the table
   says so. Target: plan throughput >= 0.7x openssl's (ratio = openssl time /
   plan time). For information: a plain Python loop (open, read, hashlib
   sha256 per file) and `verify_whole` alone (part of every plan).
   The page cache is warm for all of them: every artifact is read once before
   the rounds (shown), and each contender runs once untimed first.
2. Apply throughput per `--apply-count` (1,000) deletions. A template session
   of 1,000 artifacts of `--apply-kb` (4) KB is built once the same way. Each
   round copies it to a fresh path (fsyncing the copy, so no dirty page is
   flushed inside a timed fsync), opens it, plans with `dry_run=False`
   (untimed; shown), then times `apply_cleanup_from_journal(session, plan,
   now=...)`, which deletes every artifact and is checked: all `deleted`, no
   error, `tool-results/` and `.quarantine/` empty, and one
   `Artifact.Quarantined` and one `Artifact.Deleted` event per deletion in the
   store (any other event apply records is shown in a note).
   spillvault works in batches of up to `BATCH_CANDIDATES` (32) candidates
   and `BATCH_BYTES` (32 MiB) planned, each under one hold of the session
   lock: it folds the live claims, and per candidate loads the artifact and
   lstats the file; records the batch's quarantine intents (one event per
   candidate, all in one commit of the SQLite store: WAL with
   synchronous=FULL, so one fdatasync), makes `.quarantine/<intent>/` and
   fsyncs `.quarantine/`, moves every file in and fsyncs both directories,
   re-opens and re-hashes each to check it is still the planned file and
   unlinks it, fsyncs the intent directory, records the deletions (one more
   commit and fdatasync), and removes the intent directory and fsyncs
   `.quarantine/`. That is 5 fsyncs and 2 SQLite commits, 7 durable writes per
   batch. The longest hold of the session lock in each apply (how long a
   publication may wait for GC) is shown too.
   Baselines on copies of the same 1,000 files (made and fsynced untimed):
   (a) plain `os.unlink` of each file and one directory fsync at the end;
   (b) a careful deleter: per file, rename into a subdirectory and fsync the
   directory it left, unlink it there and fsync the subdirectory (2 durable
   writes per deletion). The table shows deletions/s and ms per 1,000, and
   how many times the baseline's time spillvault takes against both. Target:
   at most 3x the careful deleter's time. A note prices spillvault's durable
   writes at the careful deleter's cost per sync, to separate the syncs from
   the rest.

`--rounds` (3) rounds of each, the order of the contenders alternating;
medians are shown, and the ratios are also the median of per-round ratios
(the disk's speed drifts on a shared host). `--profile` runs one more plan
and one more apply under cProfile and prints the top `PROFILE_TOP` entries
by cumulative and by own time: a per-phase breakdown.

Run from the repository root:

    .venv/bin/python bench/bench_gc.py
    .venv/bin/python bench/bench_gc.py --quick             # 1,000 artifacts, 100 MB
    .venv/bin/python bench/bench_gc.py --artifacts 2000 --total-mb 500 --profile
    .venv/bin/python bench/bench_gc.py --rounds 5 --dir /some/disk

Everything goes in a temp dir under `--dir` (default: the system temp dir),
which is removed; (1) needs `--total-mb` of free space and some more. fsync
figures mean nothing on tmpfs; the header names the file system.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Self

from spillvault.adapters.services.gc import (
    BATCH_BYTES,
    BATCH_CANDIDATES,
    apply_cleanup_from_journal,
    plan_cleanup_from_journal,
)
from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.session import Session, open_session
from spillvault.adapters.storage.layout import QUARANTINE_DIR, TOOL_RESULTS_DIR
from spillvault.domain.values import ArtifactCleanupPolicy

from harness import (
    CASE_HEADERS,
    MB,
    WARMUP_ROUND,
    Lap,
    fsync_path,
    interleave,
    mbps,
    parse_digests,
    print_footer,
    print_host,
    print_profile,
    print_table,
    restore,
    round_by_round,
    run_in_temp_dir,
    verdict,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from spillvault.adapters.storage.advisory_lock import AdvisoryLock
    from spillvault.adapters.storage.session_lock import SessionLock
    from spillvault.domain.cleanup import ArtifactCleanupPlan

    from harness import Rounds

KB = 1000
READ_BLOCK = 1 << 20
DEFAULT_ARTIFACTS = 10_000
DEFAULT_TOTAL_MB = 1000.0
QUICK_ARTIFACTS = 1000
QUICK_TOTAL_MB = 100.0
DEFAULT_APPLY_COUNT = 1000
DEFAULT_APPLY_KB = 4.0
DEFAULT_ROUNDS = 3
TTL_SECONDS = 3600
AHEAD = timedelta(days=2)
SAMPLE_CHECKS = 64
RATIO_TARGET = 0.7
FREE_MARGIN = 500 * MB
DELETION_TOPICS = ("Artifact.Quarantined", "Artifact.Deleted")
SPILLVAULT_SYNCS = 7  # 5 fsyncs + 2 SQLite commits per batch
CAREFUL_SYNCS = 2
CAREFUL_TARGET = 3.0
PROFILE_TOP = 8
PLAN_SESSION = "gc-bench-plan"
APPLY_SESSION = "gc-bench-apply"
ARTIFACT_GLOB = "tool_result_*"
LEVELS = ("INFO", "INFO", "DEBUG", "WARN", "ERROR")
ROUTES = ("GET /api/orders", "POST /api/cart", "GET /healthz", "PUT /api/me")


def log_text(size: int) -> bytes:
    """Return `size` bytes of log-like text (~60 bytes a line)."""
    lines = []
    produced = number = 0
    while produced < size:
        line = (
            f"03-01 {number // 3600 % 24:02d}:{number // 60 % 60:02d}:"
            f"{number % 60:02d} {LEVELS[number % 5]} w{number % 16:02d} "
            f"{ROUTES[number % 4]} {(number * 2654435761) % 997}ms\n"
        ).encode("ascii")
        lines.append(line)
        produced += len(line)
        number += 1
    return b"".join(lines)[:size]


def artifact_bytes(body: bytes, number: int) -> bytes:
    """The body under a unique first line, cut to the body's length."""
    header = b"gc bench artifact %08d\n" % number
    return (header + body)[: len(body)]


# ------------------------------------------------------------------ host facts


def hasher() -> tuple[str, str]:
    """The baseline's digest command and its label."""
    if shutil.which("openssl"):
        done = subprocess.run(
            ["openssl", "version"], capture_output=True, text=True, check=False
        )
        version = " ".join(done.stdout.split()[:2]) or "openssl"
        return "openssl dgst -sha256", f"xargs {version} dgst -sha256"
    return "sha256sum", "xargs sha256sum (NO openssl)"


# ------------------------------------------------------------------ fixtures


@dataclass(frozen=True)
class Build:
    """How long storing a fixture's artifacts took."""

    seconds: float
    first_ms: float
    """Mean ms per store over the first tenth of the artifacts."""
    last_ms: float
    """Mean ms per store over the last tenth."""

    def describe(self, count: int, total: int) -> str:
        """One line for the setup report."""
        rate = count / self.seconds
        return (
            f"stored with store.store in {self.seconds:.1f} s ({rate:,.0f} "
            f"artifacts/s, {mbps(total, self.seconds)}; each hashed, fsynced, "
            f"recorded); {self.first_ms:.1f} ms per store over the first tenth, "
            f"{self.last_ms:.1f} ms over the last"
        )


def build_session(path: str, count: int, size: int) -> Build:
    """Create a session of `count` artifacts of `size` bytes; time the stores."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    body = log_text(size)
    tenth = max(1, count // 10)
    marks = []
    started = time.perf_counter()
    with open_session(path) as session:
        store = session.externalizer.store
        for number in range(count):
            if number in {tenth, count - tenth}:
                marks.append(time.perf_counter())
            store.store([artifact_bytes(body, number)], source_tool="bash")
        ended = time.perf_counter()
    if len(marks) < 2:  # fewer than 10 artifacts: one mean for both
        marks = [ended, started]
    return Build(
        seconds=time.perf_counter() - started,
        first_ms=(marks[0] - started) / tenth * 1e3,
        last_ms=(ended - marks[-1]) / tenth * 1e3,
    )


def artifact_names(session_path: str) -> list[str]:
    """The artifact files of a session, sorted."""
    results = os.path.join(session_path, TOOL_RESULTS_DIR)
    return sorted(n for n in os.listdir(results) if n.startswith("tool_result_"))


def read_all(session_path: str, names: list[str]) -> tuple[int, float]:
    """Read every artifact once (the page-cache warm-up); bytes and seconds."""
    results = os.path.join(session_path, TOOL_RESULTS_DIR)
    total = 0
    started = time.perf_counter()
    for name in names:
        with open(os.path.join(results, name), "rb", buffering=0) as handle:
            while block := handle.read(READ_BLOCK):
                total += len(block)
    return total, time.perf_counter() - started


def sha256_file(path: str) -> str:
    """hashlib's digest of a whole file."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while block := handle.read(READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


# ----------------------------------------------------------- 1. plan throughput


@dataclass(frozen=True)
class PlanFixture:
    """The big session, open, and what every plan must agree with."""

    session: Session
    names: list[str]
    size: int
    expected: dict[str, str]
    """hashlib digests of the sample, by filename."""
    now_ahead: datetime


def plan_policy(*, dry_run: bool) -> ArtifactCleanupPolicy:
    """Every artifact older than the TTL is a candidate; no cap."""
    return ArtifactCleanupPolicy(
        orphan_ttl_seconds=TTL_SECONDS, max_deletions=None, dry_run=dry_run
    )


def check_plan(
    plan: ArtifactCleanupPlan, count: int, size: int, expected: dict[str, str]
) -> None:
    """All planned_delete; the sample's snapshots equal hashlib's digest and size."""
    assert plan.counts == {"planned_delete": count}, plan.counts
    by_name = {d.filename: d for d in plan.decisions}
    for name, digest in expected.items():
        snapshot = by_name[name].snapshot
        assert snapshot is not None, name
        assert snapshot.content_sha256 == digest, (name, snapshot, digest)
        assert snapshot.size_bytes == size, (name, snapshot.size_bytes, size)


def dry_run_plan(fixture: PlanFixture) -> ArtifactCleanupPlan:
    """One dry-run plan of the big session."""
    return plan_cleanup_from_journal(
        fixture.session,
        policy=plan_policy(dry_run=True),
        now=fixture.now_ahead,
    )


def timed_plan(lap: Lap, fixture: PlanFixture) -> None:
    """One dry-run plan of the big session, timed; checked."""
    with lap.time():
        plan = dry_run_plan(fixture)
    assert plan.dry_run
    check_plan(plan, len(fixture.names), fixture.size, fixture.expected)


def timed_openssl(lap: Lap, fixture: PlanFixture, command: str) -> None:
    """find | xargs -0 <command> over the artifacts, timed; output checked."""
    script = (
        "set -o pipefail; find tool-results -name "
        f"'{ARTIFACT_GLOB}' -print0 | xargs -0 {command}"
    )
    with lap.time():
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=fixture.session.path,
            capture_output=True,
            text=True,
            check=True,
        )
    digests = parse_digests(done.stdout)
    assert len(digests) == len(fixture.names), (len(digests), len(fixture.names))
    for name, digest in fixture.expected.items():
        assert digests[name] == digest, (name, digests[name], digest)


def timed_hashlib(lap: Lap, fixture: PlanFixture) -> None:
    """A plain Python loop: open, read, sha256 each file; timed."""
    results = os.path.join(fixture.session.path, TOOL_RESULTS_DIR)
    with lap.time():
        digests = {
            name: sha256_file(os.path.join(results, name)) for name in fixture.names
        }
    for name, digest in fixture.expected.items():
        assert digests[name] == digest, name


def timed_verify(lap: Lap, fixture: PlanFixture) -> None:
    """The plan's first step alone: the journal verified whole; timed."""
    with lap.time():
        session_projection(fixture.session).verify_whole()


def plan_rounds(fixture: PlanFixture, command: str, rounds: int) -> Rounds:
    """Time the contenders over `rounds` rounds, alternating their order."""
    contenders: dict[str, Callable[[Lap], None]] = {
        "plan": lambda lap: timed_plan(lap, fixture),
        "openssl": lambda lap: timed_openssl(lap, fixture, command),
        "hashlib": lambda lap: timed_hashlib(lap, fixture),
        "verify": lambda lap: timed_verify(lap, fixture),
    }
    # The warm-up loads code and binaries and warms the page cache.
    return interleave(contenders, rounds, warmup=True)


# ---------------------------------------------------------- 2. apply throughput


class HoldTimer:
    """Times each outermost hold of a session lock while in a `with` block."""

    def __init__(self, lock: SessionLock | AdvisoryLock) -> None:
        self.lock = lock
        self.seconds: list[float] = []
        self.depth = 0
        self.started = 0.0

    def __enter__(self) -> Self:
        """Wrap the lock's acquire and release (on the instance only)."""
        acquire, release = self.lock.acquire, self.lock.release

        def timed_acquire() -> None:
            acquire()
            self.depth += 1
            if self.depth == 1:
                self.started = time.perf_counter()

        def timed_release() -> None:
            self.depth -= 1
            if self.depth == 0:
                self.seconds.append(time.perf_counter() - self.started)
            release()

        self.lock.acquire = timed_acquire  # type: ignore[method-assign]
        self.lock.release = timed_release  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        """Unwrap the lock."""
        del self.lock.acquire, self.lock.release


def apply_round(
    lap: Lap,
    template: str,
    path: str,
    count: int,
    ahead: datetime,
    *,
    profiler: cProfile.Profile | None = None,
) -> dict[str, int]:
    """Apply a real plan deleting every artifact of a fresh copy; checked.

    Sections: "open", "plan" (dry_run=False), the apply (main) and "hold",
    its longest hold of the session lock. Returns the events apply recorded
    besides the two per deletion, by topic.
    """
    restore(template, path)
    with lap.time("open"):
        session = open_session(path)
    try:
        with lap.time("plan"):
            plan = plan_cleanup_from_journal(
                session,
                policy=plan_policy(dry_run=False),
                now=ahead,
            )
        assert not plan.dry_run
        assert plan.counts == {"planned_delete": count}, plan.counts
        positions = session.store.max_position()
        with HoldTimer(session.lock) as holds, lap.time():
            if profiler is None:
                report = apply_cleanup_from_journal(session, plan, now=ahead)
            else:
                report = profiler.runcall(
                    apply_cleanup_from_journal, session, plan, now=ahead
                )
        lap.add(max(holds.seconds), "hold")
        assert report.error is None, report.error
        assert report.counts == {"deleted": count}, report.counts
        assert not report.untouched, report.untouched[:5]
        topics = Counter(
            note.topic.rpartition(":")[2]
            for note in session.store.notifications(after=positions)
        )
        for topic in DELETION_TOPICS:
            assert topics.pop(topic, 0) == count, (topic, topics)
        for directory in (TOOL_RESULTS_DIR, QUARANTINE_DIR):
            left = os.listdir(os.path.join(path, directory))
            assert not left, (directory, left[:5])
    finally:
        session.close()
    return dict(topics)


def baseline_copy(template: str, scratch: str) -> tuple[str, list[str]]:
    """A durable copy of the template's artifact files; the dir and the names."""
    target = os.path.join(scratch, "baseline-files")
    restore(os.path.join(template, TOOL_RESULTS_DIR), target)
    return target, sorted(os.listdir(target))


def unlink_round(lap: Lap, template: str, scratch: str) -> None:
    """Plain unlink of every file, one directory fsync; timed."""
    target, names = baseline_copy(template, scratch)
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with lap.time():
            for name in names:
                os.unlink(name, dir_fd=fd)
            os.fsync(fd)
    finally:
        os.close(fd)
    assert not os.listdir(target)


def careful_round(lap: Lap, template: str, scratch: str) -> None:
    """Per file: rename into a subdir + fsync, unlink + fsync; timed."""
    target, names = baseline_copy(template, scratch)
    os.mkdir(os.path.join(target, ".trash"), 0o700)
    fsync_path(target)
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    trash = os.open(".trash", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    try:
        with lap.time():
            for name in names:
                os.rename(name, name, src_dir_fd=fd, dst_dir_fd=trash)
                os.fsync(fd)
                os.unlink(name, dir_fd=trash)
                os.fsync(trash)
    finally:
        os.close(trash)
        os.close(fd)
    assert os.listdir(target) == [".trash"]
    assert not os.listdir(os.path.join(target, ".trash"))


def apply_rounds(
    template: str,
    scratch: str,
    count: int,
    *,
    ahead: datetime,
    rounds: int,
    profiler: cProfile.Profile | None,
) -> tuple[Rounds, list[dict[str, int]]]:
    """Run (2)'s rounds, alternating the order of the three contenders.

    Returns the times and, per round, the events apply recorded besides the
    two per deletion.
    """
    path = os.path.join(scratch, "work", APPLY_SESSION)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    others: list[dict[str, int]] = []
    contenders: dict[str, Callable[[Lap], None]] = {
        "spillvault": lambda lap: others.append(
            apply_round(lap, template, path, count, ahead)
        ),
        "unlink": lambda lap: unlink_round(lap, template, scratch),
        "careful": lambda lap: careful_round(lap, template, scratch),
    }
    times = interleave(contenders, rounds)
    if profiler is not None:  # one more, after the timed rounds
        apply_round(Lap(WARMUP_ROUND), template, path, count, ahead, profiler=profiler)
    return times, others


# ------------------------------------------------------------------- report

Row = tuple[str, str, str, str, str]


def plan_table(
    times: Rounds, count: int, total: int, label: str
) -> tuple[list[Row], str]:
    """Rows of (1) and its per-round note."""
    med = {name: times.stats(name).median for name in times.times}
    ratio = times.ratio("openssl", "plan")  # throughput: baseline time / ours
    rows: list[Row] = [
        (
            f"1 plan_cleanup_from_journal, {count:,} artifacts, {total / MB:,.0f} MB",
            (
                f"{mbps(total, med['plan'])} ({count / med['plan']:,.0f} "
                f"artifacts/s, {med['plan']:.2f} s)"
            ),
            f"{mbps(total, med['openssl'])} {label} ({med['openssl']:.2f} s)",
            ratio.describe(),
            f">= {RATIO_TARGET}x {verdict(ok=ratio.of_medians >= RATIO_TARGET)}",
        ),
        (
            "  info: Python open+read+hashlib.sha256 per file",
            f"{mbps(total, med['hashlib'])} ({med['hashlib']:.2f} s)",
            "same baseline",
            f"{med['openssl'] / med['hashlib']:.2f}x",
            "-",
        ),
        (
            "  info: of each plan, journal verify_whole alone",
            f"{med['verify'] * 1e3:,.1f} ms",
            "-",
            f"{med['verify'] / med['plan']:.1%} of the plan",
            "-",
        ),
    ]
    note = "(1) rounds, seconds plan/openssl/hashlib/verify_whole: " + round_by_round(
        *(times.seconds(name) for name in ("plan", "openssl", "hashlib", "verify")),
        specs=(".2f", ".2f", ".2f", ".3f"),
    )
    return rows, note


def batches_of(count: int, size: int) -> tuple[int, int]:
    """Candidates per batch and batches for `count` deletions of `size` bytes."""
    per = min(BATCH_CANDIDATES, max(1, BATCH_BYTES // size))
    return per, math.ceil(count / per)


def apply_table(
    times: Rounds, others: list[dict[str, int]], count: int, size: int
) -> tuple[list[Row], list[str]]:
    """Rows of (2) and its notes."""
    med = times.stats("spillvault").median
    unlink = times.stats("unlink").median
    careful = times.stats("careful").median
    per_thousand = 1000 / count

    def rate(seconds: float) -> str:
        return (
            f"{count / seconds:,.0f} deletions/s "
            f"({seconds * per_thousand * 1e3:,.0f} ms per 1,000)"
        )

    def times_of(base: str) -> str:
        ratio = times.ratio("spillvault", base)
        return f"{ratio.of_medians:,.1f}x its time (per-round {ratio.per_round:,.1f}x)"

    open_ms = times.stats("spillvault", "open").median * 1e3
    plan_s = times.stats("spillvault", "plan").median
    hold = times.stats("spillvault", "hold")
    careful_ratio = times.ratio("spillvault", "careful").of_medians
    per, batches = batches_of(count, size)
    rows: list[Row] = [
        (
            f"2 apply_cleanup_from_journal, {count:,} deletions",
            rate(med),
            f"unlink + 1 dir fsync: {rate(unlink)}",
            times_of("unlink"),
            "-",
        ),
        (
            "  same, against a careful deleter",
            "-",
            f"rename+fsync+unlink+fsync: {rate(careful)}",
            times_of("careful"),
            f"<= {CAREFUL_TARGET:g}x {verdict(ok=careful_ratio <= CAREFUL_TARGET)}",
        ),
        (
            "  info: longest session-lock hold of an apply",
            (
                f"{hold.median * 1e3:,.1f} ms (rounds {hold.low * 1e3:,.1f}-"
                f"{hold.high * 1e3:,.1f}); {batches:,} holds of <= {per} deletions"
            ),
            "-",
            "-",
            "-",
        ),
        (
            "  info: open_session / plan (dry_run=False) first",
            f"{open_ms:,.0f} ms / {plan_s:.2f} s",
            "-",
            "-",
            "-",
        ),
    ]
    topics = sorted({topic for run in others for topic in run})
    extra = ", ".join(
        "/".join(str(run.get(topic, 0)) for run in others) + f" {topic}"
        for topic in topics
    )
    per_sync = careful / (CAREFUL_SYNCS * count)
    syncs = SPILLVAULT_SYNCS * batches
    floor = per_sync * syncs
    notes = [
        "(2) rounds, seconds spillvault/unlink/careful: "
        + round_by_round(
            *(times.seconds(name) for name in ("spillvault", "unlink", "careful")),
            specs=(".2f", ".3f", ".2f"),
        ),
        (
            f"(2) durable writes: spillvault {SPILLVAULT_SYNCS} per batch of <= "
            f"{per} (5 fsyncs + 2 SQLite commits, each an fdatasync), {syncs:,} for "
            f"{count:,} deletions ({syncs / count:.2f} per deletion), careful "
            f"{CAREFUL_SYNCS} per deletion; at the careful deleter's "
            f"{per_sync * 1e3:.2f} ms per sync, spillvault's syncs would take "
            f"{floor:.2f} s: of its {med:.2f} s, {(med - floor) / count * 1e3:.2f} ms "
            "per deletion is the rest (checks, events, moves, re-hashing)"
        ),
        (
            f"(2) events recorded by each apply besides the {len(DELETION_TOPICS)} "
            f"per deletion (per round): {extra or 'none'}"
        ),
    ]
    return rows, notes


# --------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--artifacts",
        type=int,
        default=None,
        help=f"artifacts planned in (1) ({DEFAULT_ARTIFACTS:,}; "
        f"--quick: {QUICK_ARTIFACTS:,})",
    )
    parser.add_argument(
        "--total-mb",
        type=float,
        default=None,
        help=f"their total size in MB ({DEFAULT_TOTAL_MB:,.0f}; "
        f"--quick: {QUICK_TOTAL_MB:,.0f})",
    )
    parser.add_argument(
        "--apply-count",
        type=int,
        default=DEFAULT_APPLY_COUNT,
        help=f"deletions per round of (2) ({DEFAULT_APPLY_COUNT:,})",
    )
    parser.add_argument(
        "--apply-kb",
        type=float,
        default=DEFAULT_APPLY_KB,
        help=f"size of each artifact deleted in (2), KB ({DEFAULT_APPLY_KB:g})",
    )
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds of (1) and (2)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_ARTIFACTS:,} artifacts, {QUICK_TOTAL_MB:,.0f} MB",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile one more plan and one more apply; print the top entries",
    )
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    args = parser.parse_args(argv)
    if args.artifacts is None:
        args.artifacts = QUICK_ARTIFACTS if args.quick else DEFAULT_ARTIFACTS
    if args.total_mb is None:
        args.total_mb = QUICK_TOTAL_MB if args.quick else DEFAULT_TOTAL_MB
    if args.artifacts < 1 or args.apply_count < 1 or args.rounds < 1:
        parser.error("--artifacts, --apply-count and --rounds must be >= 1")
    if args.total_mb * MB / args.artifacts < 64 or args.apply_kb * KB < 64:
        parser.error("artifacts must hold at least 64 bytes each")
    return args


def main(argv: list[str] | None = None) -> int:
    """Build the fixtures, run both measurements, print the table, clean up."""
    args = parse_args(argv)
    if shutil.which("bash") is None or shutil.which("xargs") is None:
        print("bash, find and xargs are needed for the baseline", file=sys.stderr)
        return 2
    return run_in_temp_dir(bench, args)


def plan_phase(
    root: str, args: argparse.Namespace, command: str
) -> tuple[Rounds, datetime, cProfile.Profile | None]:
    """(1): build once, reopen, warm the page cache, time the rounds."""
    count = args.artifacts
    size = int(args.total_mb * MB) // count
    total = size * count
    plan_path = os.path.join(root, "plan", PLAN_SESSION)
    built = build_session(plan_path, count, size)
    names = artifact_names(plan_path)
    assert len(names) == count, (len(names), count)
    print(
        f"(1) setup: {count:,} artifacts of {size:,} bytes ({total / MB:,.0f} MB) "
        + built.describe(count, total)
    )
    gc.collect()
    opened = time.perf_counter()
    session = open_session(plan_path)
    opened = time.perf_counter() - opened
    profiler = cProfile.Profile() if args.profile else None
    try:
        step = max(1, count // SAMPLE_CHECKS)
        results = os.path.join(plan_path, TOOL_RESULTS_DIR)
        expected = {
            name: sha256_file(os.path.join(results, name)) for name in names[::step]
        }
        for name, digest in expected.items():
            artifact = session.store.get_artifact(name)
            content = None if artifact is None else artifact.stored_content
            assert content is not None, name
            assert content.content_sha256 == digest, name
        read, warm = read_all(plan_path, names)
        print(
            f"(1) open_session of the built session (recovery pass) "
            f"{opened:.2f} s; page cache warm-up: every artifact read once, "
            f"{read / MB:,.0f} MB in {warm:.2f} s ({mbps(read, warm)}), then one "
            f"untimed run of each contender; median of {args.rounds} rounds, "
            f"order alternating; {len(expected)} digests checked each run"
        )
        ahead = session.clock.now() + AHEAD
        fixture = PlanFixture(session, names, size, expected, ahead)
        times = plan_rounds(fixture, command, args.rounds)
        if profiler is not None:
            check_plan(
                profiler.runcall(dry_run_plan, fixture),
                count,
                size,
                expected,
            )
        assert artifact_names(plan_path) == names, "a dry-run plan changed files"
    finally:
        session.close()
    gc.collect()
    shutil.rmtree(os.path.dirname(plan_path), ignore_errors=True)
    return times, ahead, profiler


def apply_phase(
    root: str, args: argparse.Namespace, ahead: datetime
) -> tuple[Rounds, list[dict[str, int]], cProfile.Profile | None]:
    """(2): one template, copied for every round."""
    count = args.apply_count
    size = int(args.apply_kb * KB)
    template = os.path.join(root, "template", APPLY_SESSION)
    built = build_session(template, count, size)
    print(
        f"(2) setup: template of {count:,} artifacts of {size:,} bytes "
        + built.describe(count, count * size)
        + "; every round works on a fresh fsynced copy of it"
    )
    profiler = cProfile.Profile() if args.profile else None
    times, others = apply_rounds(
        template, root, count, ahead=ahead, rounds=args.rounds, profiler=profiler
    )
    return times, others, profiler


def bench(root: str, args: argparse.Namespace) -> int:
    """Measure everything under `root` and print the table."""
    started = time.perf_counter()
    command, label = hasher()
    print_host(root, f"SQLite {sqlite3.sqlite_version}", f"baseline {label}")
    count = args.artifacts
    total = int(args.total_mb * MB) // count * count
    free = shutil.disk_usage(root).free
    if free < total + FREE_MARGIN:
        print(
            f"only {free / 1e9:.2f} GB free: (1) needs {total / 1e9:.2f} GB + "
            f"{FREE_MARGIN / 1e9:.1f} GB; use --total-mb or --dir",
            file=sys.stderr,
        )
        return 2
    print(f"{free / 1e9:.0f} GB free")

    plan_times, ahead, plan_profile = plan_phase(root, args, command)
    apply_times, others, apply_profile = apply_phase(root, args, ahead)

    rows, plan_note = plan_table(plan_times, count, total, label)
    apply_rows, apply_notes = apply_table(
        apply_times, others, args.apply_count, int(args.apply_kb * KB)
    )
    print()
    print_table(CASE_HEADERS, rows + apply_rows)
    print()
    for note in [plan_note, *apply_notes]:
        print(note)
    if plan_profile is not None:
        print_profile(plan_profile, f"one plan of {count:,} artifacts", PROFILE_TOP)
    if apply_profile is not None:
        what = f"one apply of {args.apply_count:,} deletions"
        print_profile(apply_profile, what, PROFILE_TOP)
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
