#!/usr/bin/env python3
"""Scaling: how spill, store, publish, open and GC grow, as fitted exponents.

Issue 19: spill time for 1, 10, 100 and 1,000 MB, and publish, open and GC
time at 1k, 10k and 100k artifacts or events, must each be linear or better,
and any step that grows with the session's history is a bug. Each curve is
measured at every size in interleaved rounds (every size and its baseline once
a round, the order reversed every other round); the table gives, per curve,
the median at each size, the same-run baseline at each size where one
applies, their ratio, and the fitted exponent: the least-squares slope of
log(time) against log(size) over the medians (and over each round alone, to
show the noise), the baseline's beside it. A total time passes at an exponent
<= 1.1 (linear or better); a per-operation time must not grow with the
history before it, and passes at <= 0.1.

1. Spill at 1, 10, 100 and 1,000 MB: log text (one ERROR line in 7, so the
   key-line scanner works) written in 1 MiB pieces into
   `ToolResultExternalizer.open_stream("bash")`, then `close()` (hashed,
   fsynced, recorded, previewed); time per spill. A round repeats the smaller
   spills until it has spilled `SPILL_ROUND_MB` of each size. Baseline: the
   same pieces piped into `bash -c 'cat > f && sync f && openssl dgst -sha256
   f'` (`sha256sum` if openssl is missing). Both digests are checked against
   hashlib's; each file is removed after its check, so the disk holds one at a
   time. The free space is checked first: a size that does not fit twice, with
   a margin, is dropped, and the output says so; `--max-mb` caps the sizes.
2. Storing one more artifact in a session already holding 1k, 10k and 100k
   artifacts: `process(text, "bash")` of a distinct ~100 KB str (spilled).
   Each round reopens the session (timed apart: 4c), then times (a)
   the first store after the open, what a process that opens a session to
   store one output pays (a hook, `spillvault run`), and (b) `STORE_OPS` more;
   time per store. Each outcome is checked: spilled, with hashlib's digest of
   the text.
3. `publish_reference` with 1k, 10k and 100k prior lease events, as in
   bench_journal.py: on a fresh copy of the primed session (below),
   `PUBLISH_WARMUP` untimed, then `PUBLISH_OPS` timed; time per publish.
   Checked: the journal checkpoint's sequence is the history plus two per
   publish, the last lease is committed and the owner shows it published.
   Baseline: SQLite's own one-row INSERT + COMMIT (WAL, synchronous=FULL) into
   a table already holding as many rows as the history has events; time per
   commit (a publish makes two).
4. `open_session` with 1k, 10k and 100k lease events: (a) the first (cold)
   open of a fresh copy whose lease events are in the store only (journal
   empty, no saved view): it catches up the whole journal and folds the view;
   (b) after closing it, a second (warm) open. Checked: the journal
   checkpoint's sequence equals the history after both. Baseline for both:
   reading the journal the first open wrote and hashing it (hashlib.sha256,
   page cache warm), interleaved with the opens. (c) From (2): `open_session`
   of a session of 1k, 10k and 100k artifacts (view saved; the recovery pass
   goes over every artifact); no baseline.
5. GC over sessions of 1k, 10k and 100k artifacts of ~1 KB. (a) A dry-run
   `plan_cleanup_from_journal` (TTL one hour, `now` two days ahead: every
   artifact `planned_delete`); total time. Checked: the counts, and the
   snapshot digest and size of a sample of `SAMPLE_CHECKS` artifacts against
   hashlib's. Baseline: `find tool-results -name 'tool_result_*' -print0 |
   xargs -0 openssl dgst -sha256` over the same files, one digest per file,
   the sample's checked (`sha256sum` if openssl is missing). (b)
   `apply_cleanup_from_journal` of 1,000 deletions: each round first adds
   1,000 artifacts (untimed, the fixture's way) and plans with
   `max_deletions=1000`, `dry_run=False` (untimed, shown in a note), so the
   session holds N + 1,000 before the apply and N after; time per deletion.
   One untimed apply at the smallest size goes first (code, directories).
   Checked: 1,000 `deleted`, no error, one `Artifact.Quarantined` and one
   `Artifact.Deleted` event each, 1,000 files fewer, `.quarantine/` empty.
   Baseline: apply's directory work alone, in a directory of as many (empty)
   files as the session holds: each round adds 1,000 files of the same size
   (synced, untimed), then per batch of `gc.BATCH_CANDIDATES` makes a
   subdirectory of a trash directory and fsyncs the trash, renames the files
   in, fsyncs the subdirectory and the directory they left, unlinks them,
   fsyncs the subdirectory, removes it and fsyncs the trash (apply's five
   fsyncs per batch; no store commits, no re-hashing). Its exponent is the
   file system's own growth with the directory's size.

Fixtures, built fast and honestly:

- Lease histories (3, 4), the way bench_journal.py builds them: a session with
  one stored artifact, and `Lease.prepare(...)` + `.commit(...)` leases on it
  (distinct transaction ids), `BATCH_LEASES` per `save_aggregates`. That
  store-only state is the "raw" template (4); after one `open_session` and
  close, the "primed" one (3). Every round works on a fresh fsynced copy.
- Artifact sessions (2, 5): what `LocalArtifactStore.store` leaves, recorded in
  batches: each file created exclusively, 0600, under the name the store's
  counter gives it, its content hashed by the store's `ContentHasher`, and its
  two events, `ArtifactNumbers.Reserved` and `Artifact.Stored` (the fields the
  store records), saved `BUILD_BATCH` artifacts per `save_aggregates`; one
  `os.sync()` after them stands in for the per-file fsyncs. The last artifact
  of each session goes through the real `store.store`, and the first dry-run
  plan must decide every other artifact exactly as it decides that one
  (status, reason, reference count, detail), or the bench stops. (5a) runs
  first, then (2), which adds its ~100 KB artifacts, then (5b), which leaves N.

`--profile` profiles one more operation of each curve at its smallest and its
largest size and prints the functions whose time per unit (per operation, or
per MB, artifact or event for a total time) grows the most between the two,
with their calls per unit: the line that grows. A curve that misses its
target is profiled so without `--profile` too.

Run from the repository root:

    .venv/bin/python bench/bench_scaling.py
    .venv/bin/python bench/bench_scaling.py --quick           # up to 10 MB / 10k
    .venv/bin/python bench/bench_scaling.py --max-mb 100 --rounds 5 --profile
    .venv/bin/python bench/bench_scaling.py --max-count 10000   # 1k and 10k
    .venv/bin/python bench/bench_scaling.py --dir /some/disk

Everything goes in a temp dir under `--dir` (default: the system temp dir),
which is removed at the end (100k files take a while to unlink on a slow
disk). fsync figures mean nothing on tmpfs; the header names the file system.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import math
import os
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from eventsourcing.application import AggregateNotFoundError

from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.services.gc import (
    BATCH_CANDIDATES,
    apply_cleanup_from_journal,
    plan_cleanup_from_journal,
)
from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.session import Session, ToolResultExternalizer, open_session
from spillvault.adapters.storage.content_writer import ContentHasher, summary_for
from spillvault.adapters.storage.fs import (
    DIR_FLAGS,
    EXCLUSIVE_CREATE,
    PRIVATE_FILE_MODE,
)
from spillvault.adapters.storage.layout import QUARANTINE_DIR, TOOL_RESULTS_DIR
from spillvault.domain.artifact import Artifact
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactLeasePhase, ArtifactReferencePresence
from spillvault.domain.lease import Lease
from spillvault.domain.numbering import ARTIFACT_NUMBERS_ID, ArtifactNumbers
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactLeaseTransaction,
    ArtifactMemoryReference,
    ArtifactRetentionClaim,
    artifact_filename,
)

from harness import (
    MAIN,
    MB,
    SQLITE_ROW,
    WARMUP_ROUND,
    Lap,
    Stats,
    insert_commit,
    interleave,
    parse_digests,
    print_footer,
    print_host,
    print_table,
    restore,
    run_in_temp_dir,
    run_lap,
    verdict,
    version_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from datetime import datetime

    from spillvault.adapters.session import ArtifactRetentionJournal
    from spillvault.domain.cleanup import ArtifactCleanupPlan

    from harness import Rounds

SPILL_MB = (1, 10, 100, 1000)
COUNTS = (1000, 10_000, 100_000)
QUICK_MAX_MB = 10
QUICK_MAX_COUNT = 10_000
DEFAULT_ROUNDS = 3
TOTAL_LIMIT = 1.1  # a total time: linear or better
PER_OP_LIMIT = 0.1  # a per-operation time: flat with history
PIECE = 1 << 20
SPILL_ROUND_MB = 20  # a round spills at least this much of each size
SPILL_MARGIN = 1000 * MB  # free space kept besides twice the largest spill
ERROR_EVERY = 7
SPILL_POOL = 16  # distinct 1 MiB pieces, cycled
BASH = "bash"
STORE_TEXT_BYTES = 100_000
STORE_OPS = 10
PUBLISH_WARMUP = 5
PUBLISH_OPS = 50
STORE_COMMITS_PER_PUBLISH = 2
BATCH_LEASES = 500  # leases (2 events each) per save_aggregates call
BUILD_BATCH = 1000  # artifacts per save_aggregates call
ARTIFACT_BYTES = 1000
APPLY_DELETIONS = 1000
TTL_SECONDS = 3600
AHEAD = timedelta(days=2)
SAMPLE_CHECKS = 64
PROFILE_TOP = 8
GROWTH_FLOOR = 0.01  # of the operation's time: smaller growth is not shown
ARTIFACT_GLOB = "tool_result_*"
SESSION_NAME = "bench-scaling-session"
DELETION_TOPICS = ("Artifact.Quarantined", "Artifact.Deleted")
LEASE_ARTIFACT_TEXT = "text\n" * 5000
LEVELS = (b"INFO", b"INFO", b"INFO", b"DEBUG", b"DEBUG", b"WARN")
ROUTES = (b"GET /api/orders", b"POST /api/cart", b"GET /healthz", b"PUT /api/me")
MESSAGES = (b"ok", b"cache miss", b"retry after timeout", b"slow query on replica")
HEADERS = (
    "curve",
    "sizes",
    "spillvault (median)",
    "baseline (same run)",
    "ratio",
    "exponent (rounds)",
    "baseline exp.",
    "target",
)

# --------------------------------------------------------------------- text


def log_text(size: int, first_line: int = 0) -> bytes:
    """Return `size` bytes of log text, one ERROR line in `ERROR_EVERY`."""
    lines = []
    produced = 0
    number = first_line
    while produced < size:
        error = number % ERROR_EVERY == ERROR_EVERY - 1
        line = b"03-01 %02d:%02d:%02d %s w%02d %s %s %dms rid=%05x\n" % (
            number // 3600 % 24,
            number // 60 % 60,
            number % 60,
            b"ERROR" if error else LEVELS[number % 6],
            number % 32,
            ROUTES[number % 4],
            b"upstream returned 502" if error else MESSAGES[number % 4],
            (number * 2654435761) % 997,
            (number * 2654435761) & 0xFFFFF,
        )
        lines.append(line)
        produced += len(line)
        number += 1
    return b"".join(lines)[:size]


def hasher() -> tuple[str, str]:
    """The digest command of the shell baselines, and its short label."""
    if shutil.which("openssl"):
        return "openssl dgst -sha256", "openssl"
    return "sha256sum", "sha256sum (NO openssl)"


# ------------------------------------------------------------------- curves


def exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """The least-squares slope of log(seconds) against log(size)."""
    fit = statistics.linear_regression(
        [math.log(size) for size in sizes], [math.log(value) for value in seconds]
    )
    return fit.slope


@dataclass(frozen=True)
class Curve:
    """One row of the table: seconds at each size, and the baseline's."""

    case: str
    sizes: tuple[int, ...]
    labels: tuple[str, ...]
    """The sizes as the table shows them (`1k`, `1,000`)."""
    size_unit: str
    seconds: tuple[Stats, ...]
    """Per size: seconds per operation (`per_op`) or in all, round by round."""
    per_op: bool
    unit: str
    """What the profile divides by: the operation, or the size's unit."""
    baseline: tuple[Stats, ...] = ()
    baseline_text: str = ""

    @property
    def limit(self) -> float:
        """The highest exponent that passes."""
        return PER_OP_LIMIT if self.per_op else TOTAL_LIMIT

    @property
    def fitted(self) -> float:
        """The exponent of the medians."""
        return exponent(self.sizes, [s.median for s in self.seconds])

    @property
    def round_fits(self) -> list[float]:
        """The exponent of each round alone."""
        rounds = len(self.seconds[0].values)
        return [
            exponent(self.sizes, [s.values[r] for s in self.seconds])
            for r in range(rounds)
        ]

    @property
    def ok(self) -> bool:
        """Whether the fitted exponent is within the limit."""
        return self.fitted <= self.limit

    def row(self) -> tuple[str, ...]:
        """The table row."""
        values = " / ".join(duration(s.median) for s in self.seconds)
        fits = " ".join(f"{fit:.2f}" for fit in self.round_fits)
        base = ratios = base_fit = "-"
        if self.baseline:
            base = " / ".join(duration(s.median) for s in self.baseline)
            base = f"{base} {self.baseline_text}"
            ratios = " / ".join(
                f"{s.median / b.median:.2f}x"
                for s, b in zip(self.seconds, self.baseline, strict=True)
            )
            base_fit = f"{exponent(self.sizes, [b.median for b in self.baseline]):.2f}"
        kind = "per op" if self.per_op else "total"
        return (
            self.case,
            " / ".join(self.labels) + f" {self.size_unit}",
            values,
            base,
            ratios,
            f"{self.fitted:.2f} ({fits})",
            base_fit,
            f"{kind} <= {self.limit} {verdict(ok=self.ok)}",
        )

    def note(self) -> str:
        """Every round's seconds, size by size."""
        parts = []
        for label, stats in zip(self.labels, self.seconds, strict=True):
            parts.append(f"{label}: " + " ".join(duration(v) for v in stats.values))
        return f"{self.case}, by round: " + "; ".join(parts)


def duration(seconds: float) -> str:
    """Format seconds in s, ms, us or ns."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e9:.0f} ns"


def short(count: int) -> str:
    """1000 -> 1k, 100000 -> 100k."""
    return f"{count // 1000}k" if count % 1000 == 0 else f"{count:,}"


def counts_text(counts: Sequence[int]) -> str:
    """`1k / 10k / 100k`."""
    return " / ".join(short(count) for count in counts)


def stats_of(
    times: Rounds, names: Sequence[str], per: float = 1.0
) -> tuple[Stats, ...]:
    """Each contender's MAIN seconds, divided by `per` (operations per round)."""
    return tuple(times.stats(name).scaled(1 / per) for name in names)


# ------------------------------------------------------------- profiling


@dataclass
class ProfiledLap(Lap):
    """A lap that also profiles one section (the contender's figure by default)."""

    profiled: str = MAIN
    profiler: cProfile.Profile = field(default_factory=cProfile.Profile)

    @contextmanager
    def time(self, section: str = MAIN) -> Iterator[None]:
        """Time the block; profile it too if it is the profiled section."""
        with super().time(section):
            if section != self.profiled:
                yield
                return
            self.profiler.enable()
            try:
                yield
            finally:
                self.profiler.disable()


FunctionKey = tuple[str, int, str]
"""A profiled function as pstats keys it: file, line, name."""
PerUnit = tuple[float, float, float]
"""A function's calls, own seconds and cumulative seconds, per unit."""
NOTHING: PerUnit = (0.0, 0.0, 0.0)


def per_unit_profile(
    call: Callable[[Lap], object], units: float, section: str
) -> dict[FunctionKey, PerUnit]:
    """Run a contender once more, profiled; each function's figures per unit."""
    lap = ProfiledLap(WARMUP_ROUND, profiled=section)
    call(lap)
    stats = pstats.Stats(lap.profiler).stats  # type: ignore[attr-defined]
    return {
        key: (calls / units, own / units, cumulative / units)
        for key, (_, calls, own, cumulative, _) in stats.items()
        if key[0] != __file__  # the bench's own frames only wrap the operation
    }


def growth_lines(
    curve: Curve,
    calls: Mapping[int, Callable[[Lap], object]],
    units: Callable[[int], float],
    section: str,
) -> list[str]:
    """Profile the smallest and the largest size; the functions that grow most."""
    small_size, large_size = curve.sizes[0], curve.sizes[-1]
    small = per_unit_profile(calls[small_size], units(small_size), section)
    large = per_unit_profile(calls[large_size], units(large_size), section)
    head = (
        f"\nprofile, {curve.case}: per {curve.unit}, at {curve.labels[0]} -> "
        f"{curve.labels[-1]} {curve.size_unit}: the functions whose time grows most"
    )
    lines = [head]
    total = max(cumulative for _, _, cumulative in large.values())
    for column, what in ((2, "cumulative"), (1, "own")):

        def growth(key: FunctionKey, column: int = column) -> float:
            return large[key][column] - small.get(key, NOTHING)[column]

        floor = GROWTH_FLOOR * total
        growing = sorted((k for k in large if growth(k) > floor), key=growth)[::-1]
        if not growing:
            lines.append(
                f"  by {what} time: nothing grows by {GROWTH_FLOOR:.0%} of the "
                f"{duration(total)} per {curve.unit}"
            )
            continue
        lines.append(f"  by {what} time (calls per {curve.unit} in brackets):")
        for key in growing[:PROFILE_TOP]:
            before, after = small.get(key, NOTHING), large[key]
            lines.append(
                f"  {duration(before[column]):>9} -> {duration(after[column]):>9}  "
                f"({before[0]:,.1f} -> {after[0]:,.1f})  {function_name(key)}"
            )
    return lines


def function_name(key: FunctionKey) -> str:
    """`file.py:12(name)`, as pstats prints it with strip_dirs."""
    filename, line, name = key
    if filename == "~":
        return name
    return f"{os.path.basename(filename)}:{line}({name})"


@dataclass(frozen=True)
class Profiling:
    """Where profiles go, and whether every curve is profiled or only the misses."""

    every: bool
    lines: list[str]

    def curve(
        self,
        curve: Curve,
        calls: Mapping[int, Callable[[Lap], object]],
        units: Callable[[int], float],
        section: str = MAIN,
    ) -> None:
        """Profile `curve` when asked to, or when it missed its target."""
        if self.every or not curve.ok:
            self.lines.extend(growth_lines(curve, calls, units, section))


# ---------------------------------------------------------------- 1. spill


@dataclass(frozen=True)
class SpillSize:
    """One spill size: its pieces and digest, and how often a round spills it."""

    mb: int
    pieces: list[bytes]
    sha256: str
    repeats: int


def spill_sizes(root: str, args: argparse.Namespace) -> list[int]:
    """The sizes to spill: capped by --max-mb and by the free space (said so)."""
    free = shutil.disk_usage(root).free
    sizes = [mb for mb in SPILL_MB if mb <= args.max_mb]
    fitting = [mb for mb in sizes if 2 * mb * MB + SPILL_MARGIN <= free]
    note = f"(1) {free / 1e9:,.1f} GB free"
    if fitting != sizes:
        dropped = ", ".join(f"{mb:,} MB" for mb in sizes if mb not in fitting)
        note += f": {dropped} would not fit twice plus a margin, dropped"
    print(note)
    return fitting


def make_spill_size(mb: int, pool: list[bytes]) -> SpillSize:
    """`mb` MB of 1 MiB pieces cycled from `pool`, the last one cut."""
    total = mb * MB
    pieces = [pool[i % len(pool)] for i in range(total // PIECE)]
    if total % PIECE:
        pieces.append(pool[len(pieces) % len(pool)][: total % PIECE])
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    repeats = max(1, SPILL_ROUND_MB // mb)
    return SpillSize(mb, pieces, digest.hexdigest(), repeats)


def gated_spill(ext: ToolResultExternalizer, size: SpillSize) -> Callable[[Lap], None]:
    """A contender: spill `size` through the gate `repeats` times; checked."""

    def call(lap: Lap) -> None:
        for _ in range(size.repeats):
            with lap.time():
                stream = ext.open_stream(BASH)
                for piece in size.pieces:
                    stream.write(piece)
                outcome = stream.close()
            assert outcome.reason == "spilled", outcome.reason
            assert outcome.artifact is not None
            assert outcome.artifact.content_sha256 == size.sha256
            os.unlink(outcome.artifact.path)  # one spill on disk at a time

    return call


def shell_spill(path: str, command: str, size: SpillSize) -> Callable[[Lap], None]:
    """A contender: the pieces into cat > f && sync f && <digest> f; checked."""
    script = f'cat > "$1" && sync "$1" && {command} "$1"'

    def call(lap: Lap) -> None:
        for _ in range(size.repeats):
            with lap.time():
                child = subprocess.Popen(
                    ["bash", "-c", script, "bash", path],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                assert child.stdin is not None
                assert child.stdout is not None
                for piece in size.pieces:
                    child.stdin.write(piece)
                child.stdin.close()
                out = child.stdout.read().decode()
                assert child.wait() == 0, out
            os.unlink(path)
            assert parse_digests(out) == {os.path.basename(path): size.sha256}, out

    return call


def spill_curve(
    root: str, args: argparse.Namespace, profiling: Profiling
) -> Curve | None:
    """Measure (1); None when fewer than two sizes fit."""
    sizes = spill_sizes(root, args)
    if len(sizes) < 2:
        print("(1) fewer than two spill sizes: no curve")
        return None
    pool = [log_text(PIECE, first_line=n * 16_000) for n in range(SPILL_POOL)]
    plan = [make_spill_size(mb, pool) for mb in sizes]
    command, label = hasher()
    scratch = os.path.join(root, "spill-baseline.log")
    ext = ToolResultExternalizer(os.path.join(root, "spill-session"))
    try:
        gated = {size.mb: gated_spill(ext, size) for size in plan}
        shell = {size.mb: shell_spill(scratch, command, size) for size in plan}
        contenders: dict[str, Callable[[Lap], None]] = {}
        for size in plan:
            contenders[f"spill-{size.mb}"] = gated[size.mb]
            contenders[f"shell-{size.mb}"] = shell[size.mb]
        # Code, binaries and the page cache: the smallest size of each, untimed.
        run_lap(gated[sizes[0]], WARMUP_ROUND, gc_off=False)
        run_lap(shell[sizes[0]], WARMUP_ROUND, gc_off=False)
        times = interleave(contenders, args.rounds)
        print(
            f"(1) {SPILL_POOL} distinct 1 MiB pieces cycled; a round spills "
            + ", ".join(f"{s.mb:,} MB x{s.repeats}" for s in plan)
        )
        curve = Curve(
            case="1 spill: open_stream, 1 MiB writes, close",
            sizes=tuple(sizes),
            labels=tuple(f"{mb:,}" for mb in sizes),
            size_unit="MB",
            seconds=per_spill(times, "spill", plan),
            per_op=False,
            unit="MB",
            baseline=per_spill(times, "shell", plan),
            baseline_text=f"cat+sync+{label}",
        )
        repeats = {size.mb: size.repeats for size in plan}
        profiling.curve(curve, gated, lambda mb: mb * repeats[mb])
    finally:
        ext.close()
    return curve


def per_spill(times: Rounds, kind: str, plan: list[SpillSize]) -> tuple[Stats, ...]:
    """Seconds per spill of each size (a round's total over its repeats)."""
    return tuple(
        times.stats(f"{kind}-{size.mb}").scaled(1 / size.repeats) for size in plan
    )


# ------------------------------------------------------ 3, 4. lease history


@dataclass(frozen=True)
class LeaseFixture:
    """A session with a lease history, kept as templates to copy from."""

    events: int
    path: str
    """Where every round's copy lives (always the same path)."""
    raw: str
    """Template: the lease events in the store only (journal empty, no view)."""
    primed: str
    """Template: after one open_session + close (journal caught up, view saved)."""
    memory: ArtifactMemoryReference
    claim: ArtifactRetentionClaim


def build_history(
    path: str, events: int
) -> tuple[ArtifactMemoryReference, ArtifactRetentionClaim]:
    """Create a session with one artifact and `events` lease events."""
    with open_session(path) as session:
        stored = session.externalizer.externalize(LEASE_ARTIFACT_TEXT, BASH)
        memory = stored.artifact.for_memory()
        claim = ArtifactRetentionClaim.from_memory_reference(memory)
        now = session.clock.now()
        total = events // 2
        for first in range(0, total, BATCH_LEASES):
            leases = []
            for number in range(first, min(first + BATCH_LEASES, total)):
                lease = Lease.prepare(
                    ArtifactLeaseTransaction(f"history-{number:08d}", claim, now)
                )
                lease.commit(now)
                leases.append(lease)
            session.store.save_aggregates(*leases)
    return memory, claim


def lease_fixture(root: str, events: int) -> LeaseFixture:
    """Build a history, keep it raw, open it once, keep it primed."""
    label = short(events)
    path = os.path.join(root, "leases", label, SESSION_NAME)
    os.makedirs(os.path.dirname(path), mode=0o700)
    memory, claim = build_history(path, events)
    raw = os.path.join(root, "templates", f"raw-{label}", SESSION_NAME)
    primed = os.path.join(root, "templates", f"primed-{label}", SESSION_NAME)
    shutil.copytree(path, raw, symlinks=True)
    gc.collect()
    open_session(path).close()
    shutil.copytree(path, primed, symlinks=True)
    return LeaseFixture(events // 2 * 2, path, raw, primed, memory, claim)


def publish_call(fixture: LeaseFixture) -> Callable[[Lap], None]:
    """A contender: publishes on a fresh copy of the primed session; checked."""

    def call(lap: Lap) -> None:
        restore(fixture.primed, fixture.path)
        owner = InMemoryOwner()
        session = open_session(fixture.path)
        try:
            journal = session.journal
            names = [f"publish-{i:06d}" for i in range(PUBLISH_WARMUP + PUBLISH_OPS)]
            warmup, timed = names[:PUBLISH_WARMUP], names[PUBLISH_WARMUP:]
            for tx in warmup:
                publish(journal, owner, fixture, tx)
            with lap.time():
                for tx in timed:
                    publish(journal, owner, fixture, tx)
            expected = fixture.events + 2 * len(names)
            checkpoint = session_projection(session).checkpoint
            assert checkpoint.sequence == expected, (checkpoint, expected)
            lease = session.store.get_lease(timed[-1])
            assert lease.phase is ArtifactLeasePhase.COMMITTED, lease.phase
            with owner.inspect_fenced(lease.transaction) as fence:
                presence = fence.observation.presence
            assert presence is ArtifactReferencePresence.PUBLISHED, presence
        finally:
            session.close()

    return call


def publish(
    journal: ArtifactRetentionJournal,
    owner: InMemoryOwner,
    fixture: LeaseFixture,
    tx: str,
) -> None:
    """One publish_reference of the fixture's claim under transaction `tx`."""
    journal.publish_reference(
        fixture.claim, owner.publisher(fixture.memory, tx), transaction_id=tx
    )


def sqlite_call(root: str, rows: int) -> Callable[[Lap], None]:
    """A contender: one-row INSERT + COMMITs into a table of `rows` rows."""
    ops = STORE_COMMITS_PER_PUBLISH * PUBLISH_OPS
    warmup = STORE_COMMITS_PER_PUBLISH * PUBLISH_WARMUP

    def call(lap: Lap) -> None:
        path = os.path.join(root, f"baseline-{rows}.sqlite3")
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.execute(
                "CREATE TABLE ops (id INTEGER PRIMARY KEY, payload TEXT)"
            )
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT INTO ops (payload) VALUES (?)",
                ((SQLITE_ROW,) for _ in range(rows)),
            )
            connection.execute("COMMIT")
            for _ in range(warmup):
                insert_commit(connection)
            with lap.time():
                for _ in range(ops):
                    insert_commit(connection)
            (total,) = connection.execute("SELECT count(*) FROM ops").fetchone()
            assert total == rows + warmup + ops, total
        finally:
            connection.close()
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)

    return call


def open_call(fixture: LeaseFixture) -> Callable[[Lap], None]:
    """A contender: first open of a store-only copy, close, second open; checked.

    Sections "first" and "second".
    """
    journal = os.path.join(fixture.path, RETENTION_JOURNAL_NAME)

    def call(lap: Lap) -> None:
        restore(fixture.raw, fixture.path)
        assert not os.path.exists(journal)
        checkpoints = []
        for section in ("first", "second"):
            gc.collect()
            with lap.time(section):
                session = open_session(fixture.path)
            try:
                checkpoints.append(session_projection(session).checkpoint)
            finally:
                session.close()
        first, second = checkpoints
        assert first == second, checkpoints
        assert first.sequence == fixture.events, (first, fixture.events)
        assert os.path.getsize(journal) == first.end, (journal, first)

    return call


def hash_call(path: str) -> Callable[[Lap], None]:
    """A contender: read the whole file and SHA-256 it (the naive full read)."""

    def call(lap: Lap) -> None:
        with lap.time():
            with open(path, "rb") as handle:
                data = handle.read()
            hashlib.sha256(data).hexdigest()
        assert data.count(b"\n") > 0

    return call


def lease_curves(
    root: str, counts: Sequence[int], args: argparse.Namespace, profiling: Profiling
) -> list[Curve]:
    """Measure (3) and (4) on histories of `counts` lease events."""
    started = time.perf_counter()
    fixtures = [lease_fixture(root, events) for events in counts]
    print(
        f"(3, 4) lease histories of {counts_text(counts)} events "
        f"({BATCH_LEASES} leases per save), each opened once: "
        f"{time.perf_counter() - started:.1f} s"
    )
    by_size = {f.events: f for f in fixtures}
    sizes = tuple(by_size)
    publishes = {f.events: publish_call(f) for f in fixtures}
    contenders: dict[str, Callable[[Lap], None]] = {}
    for fixture in fixtures:
        contenders[f"publish-{fixture.events}"] = publishes[fixture.events]
        contenders[f"sqlite-{fixture.events}"] = sqlite_call(root, fixture.events)
    times = interleave(contenders, args.rounds)
    ops = STORE_COMMITS_PER_PUBLISH * PUBLISH_OPS
    publish = Curve(
        case=f"3 publish_reference ({PUBLISH_OPS} a round)",
        sizes=sizes,
        labels=tuple(map(short, sizes)),
        size_unit="lease events",
        seconds=stats_of(times, [f"publish-{n}" for n in sizes], PUBLISH_OPS),
        per_op=True,
        unit="publish",
        baseline=stats_of(times, [f"sqlite-{n}" for n in sizes], ops),
        baseline_text="SQLite insert+commit",
    )
    profiling.curve(publish, publishes, lambda _: PUBLISH_OPS)

    opens = {f.events: open_call(f) for f in fixtures}
    contenders = {}
    for fixture in fixtures:
        contenders[f"open-{fixture.events}"] = opens[fixture.events]
        path = os.path.join(fixture.path, RETENTION_JOURNAL_NAME)
        contenders[f"hash-{fixture.events}"] = hash_call(path)
    # The first round opens first: from then on the journal the read hashes
    # exists (each later round reads the one the round before left).
    times = interleave(contenders, args.rounds)
    hashes = stats_of(times, [f"hash-{n}" for n in sizes])
    curves = []
    for section, case in (
        ("first", "4a first (cold) open_session, journal empty"),
        ("second", "4b second (warm) open_session"),
    ):
        curve = Curve(
            case=case,
            sizes=sizes,
            labels=tuple(map(short, sizes)),
            size_unit="lease events",
            seconds=tuple(times.stats(f"open-{n}", section) for n in sizes),
            per_op=False,
            unit="lease event",
            baseline=hashes,
            baseline_text="read+sha256 of the journal",
        )
        profiling.curve(curve, opens, float, section)
        curves.append(curve)
    for directory in ("leases", "templates"):
        shutil.rmtree(os.path.join(root, directory), ignore_errors=True)
    return [publish, *curves]


# ----------------------------------------------------- 2, 5. many artifacts


@dataclass
class ArtifactSession:
    """An open session of many small artifacts, and what its checks need."""

    count: int
    session: Session
    body: bytes
    control: str
    """The artifact the real `store.store` stored; the others must look like it."""
    sample: dict[str, str]
    """hashlib digests of a sample of the artifacts, by filename."""
    made: int
    """Artifacts made so far (numbers their unique first lines)."""
    stored: int = 0
    """Texts `process` stored so far (numbers their unique first lines)."""


def artifact_bytes(body: bytes, number: int) -> bytes:
    """The body under a unique first line, cut to the body's length."""
    return (b"scaling bench artifact %08d\n" % number + body)[: len(body)]


def add_artifacts(session: Session, first: int, count: int, body: bytes) -> None:
    """Store `count` artifacts as `LocalArtifactStore.store` does, in batches.

    The same files (exclusive create, 0600, the counter's names) and the same
    two events per artifact; one commit per `BUILD_BATCH`, and one `os.sync()`
    at the end for the store's per-file fsyncs.
    """
    try:
        numbers = session.store.repository.get(ARTIFACT_NUMBERS_ID)
    except AggregateNotFoundError:
        numbers = ArtifactNumbers.start()
    dir_fd = session.externalizer.store.dir_fd
    end = first + count
    for start in range(first, end, BUILD_BATCH):
        artifacts = [
            write_artifact(session, dir_fd, numbers, artifact_bytes(body, number))
            for number in range(start, min(start + BUILD_BATCH, end))
        ]
        session.store.save_aggregates(numbers, *artifacts)
    # Unsynced files would also be cheaper to delete (ext4 allocates late).
    os.sync()


def write_artifact(
    session: Session, dir_fd: int, numbers: ArtifactNumbers, data: bytes
) -> Artifact:
    """Write one artifact file under the next number; its `Stored` aggregate."""
    name = artifact_filename(numbers.reserve())
    fd = os.open(name, EXCLUSIVE_CREATE, PRIVATE_FILE_MODE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        assert os.write(fd, data) == len(data)
    finally:
        os.close(fd)
    hasher = ContentHasher()
    hasher.update(data)
    content, first_line = hasher.finish()
    return Artifact.store(
        name,
        content,
        source_tool=BASH,
        tool_use_id=None,
        is_error=False,
        captured_at=session.clock.now(),
        summary=summary_for(content, first_line),
    )


def artifact_session(root: str, count: int) -> ArtifactSession:
    """Build a session of `count` artifacts (the last by the real store); open it."""
    path = os.path.join(root, "artifacts", short(count), SESSION_NAME)
    os.makedirs(os.path.dirname(path), mode=0o700)
    body = log_text(ARTIFACT_BYTES)
    started = time.perf_counter()
    with open_session(path) as session:
        add_artifacts(session, 0, count - 1, body)
        store = session.externalizer.store
        control = store.store(
            [artifact_bytes(body, count - 1)], source_tool=BASH
        ).filename
    built = time.perf_counter() - started
    gc.collect()
    started = time.perf_counter()
    session = open_session(path)
    opened = time.perf_counter() - started
    names = artifact_names(session)
    assert len(names) == count, (len(names), count)
    results = os.path.join(path, TOOL_RESULTS_DIR)
    sample = {
        name: sha256_file(os.path.join(results, name))
        for name in names[:: max(1, count // SAMPLE_CHECKS)]
    }
    print(
        f"(2, 5) {count:,} artifacts of {ARTIFACT_BYTES:,} bytes built in "
        f"{built:.1f} s ({count / built:,.0f}/s); opened (folding them) in "
        f"{opened:.2f} s"
    )
    return ArtifactSession(count, session, body, control, sample, made=count)


def artifact_names(session: Session) -> list[str]:
    """The artifact files of a session, sorted."""
    results = os.path.join(session.path, TOOL_RESULTS_DIR)
    return sorted(n for n in os.listdir(results) if n.startswith("tool_result_"))


def sha256_file(path: str) -> str:
    """hashlib's digest of a whole file."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def cleanup_policy(
    *, dry_run: bool, max_deletions: int | None
) -> ArtifactCleanupPolicy:
    """Every artifact older than the TTL is a candidate."""
    return ArtifactCleanupPolicy(
        orphan_ttl_seconds=TTL_SECONDS, max_deletions=max_deletions, dry_run=dry_run
    )


def dry_run_plan(fixture: ArtifactSession, ahead: datetime) -> ArtifactCleanupPlan:
    """One dry-run plan of every artifact."""
    return plan_cleanup_from_journal(
        fixture.session,
        policy=cleanup_policy(dry_run=True, max_deletions=None),
        now=ahead,
    )


def check_fidelity(fixture: ArtifactSession, ahead: datetime) -> None:
    """The plan decides every fast-built artifact as the really stored one."""
    plan = dry_run_plan(fixture, ahead)
    decisions = {d.filename: d for d in plan.decisions}
    assert len(decisions) == fixture.count, (len(decisions), fixture.count)

    def shape(filename: str) -> tuple[object, ...]:
        d = decisions[filename]
        return d.status, d.reason, d.reference_count, d.detail

    control = shape(fixture.control)
    unlike = [name for name in decisions if shape(name) != control]
    assert not unlike, (control, [(n, shape(n)) for n in unlike[:3]])
    records = session_projection(fixture.session).artifact_records()
    states = Counter(record.state for record in records.values())
    assert states == {records[fixture.control].state: fixture.count}, states
    check_plan(plan, fixture)


def check_plan(plan: ArtifactCleanupPlan, fixture: ArtifactSession) -> None:
    """All planned_delete; the sample's snapshots are hashlib's digest and size."""
    assert plan.counts == {"planned_delete": fixture.count}, plan.counts
    decisions = {d.filename: d for d in plan.decisions}
    for name, digest in fixture.sample.items():
        snapshot = decisions[name].snapshot
        assert snapshot is not None, name
        assert snapshot.content_sha256 == digest, (name, snapshot, digest)
        assert snapshot.size_bytes == ARTIFACT_BYTES, (name, snapshot)


def plan_call(fixture: ArtifactSession, ahead: datetime) -> Callable[[Lap], None]:
    """A contender: one dry-run plan, timed; checked."""

    def call(lap: Lap) -> None:
        with lap.time():
            plan = dry_run_plan(fixture, ahead)
        check_plan(plan, fixture)

    return call


def digest_call(fixture: ArtifactSession, command: str) -> Callable[[Lap], None]:
    """A contender: find | xargs -0 <command> over the artifacts; checked."""
    script = (
        "set -o pipefail; find tool-results -name "
        f"'{ARTIFACT_GLOB}' -print0 | xargs -0 {command}"
    )

    def call(lap: Lap) -> None:
        with lap.time():
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=fixture.session.path,
                capture_output=True,
                text=True,
                check=True,
            )
        digests = parse_digests(done.stdout)
        assert len(digests) == fixture.count, (len(digests), fixture.count)
        for name, digest in fixture.sample.items():
            assert digests[name] == digest, (name, digests[name], digest)

    return call


def store_call(fixture: ArtifactSession, body: str) -> Callable[[Lap], None]:
    """A contender: reopen the session, store one, then `STORE_OPS` more; checked.

    Sections "open" (4c), "first" (2a: the first store after the open pays
    for what a store does once) and the rest (MAIN, 2b).
    """

    def call(lap: Lap) -> None:
        path = fixture.session.path
        fixture.session.close()
        gc.collect()
        with lap.time("open"):
            fixture.session = open_session(path)
        first = fixture.stored
        fixture.stored += 1 + STORE_OPS
        texts = [f"store {n:08d}\n{body}" for n in range(first, fixture.stored)]
        digests = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
        process = fixture.session.externalizer.process
        with lap.time("first"):
            outcomes = [process(texts[0], BASH)]
        with lap.time():
            outcomes += [process(text, BASH) for text in texts[1:]]
        for outcome, digest in zip(outcomes, digests, strict=True):
            assert outcome.reason == "spilled", outcome.reason
            assert outcome.artifact is not None
            assert outcome.artifact.content_sha256 == digest

    return call


def apply_call(fixture: ArtifactSession, ahead: datetime) -> Callable[[Lap], None]:
    """A contender: add 1,000 artifacts, plan, apply 1,000 deletions; checked.

    The plan (dry_run=False) is timed apart, as section "plan".
    """

    def call(lap: Lap) -> None:
        session = fixture.session  # (2) opened it again
        quarantine = os.path.join(session.path, QUARANTINE_DIR)
        add_artifacts(session, fixture.made, APPLY_DELETIONS, fixture.body)
        fixture.made += APPLY_DELETIONS
        before = len(artifact_names(session))
        with lap.time("plan"):
            plan = plan_cleanup_from_journal(
                session,
                policy=cleanup_policy(dry_run=False, max_deletions=APPLY_DELETIONS),
                now=ahead,
            )
        assert plan.counts["planned_delete"] == APPLY_DELETIONS, plan.counts
        position = session.store.max_position()
        with lap.time():
            report = apply_cleanup_from_journal(session, plan, now=ahead)
        assert report.error is None, report.error
        assert report.counts["deleted"] == APPLY_DELETIONS, report.counts
        topics = Counter(
            note.topic.rpartition(":")[2]
            for note in session.store.notifications(after=position)
        )
        for topic in DELETION_TOPICS:
            assert topics[topic] == APPLY_DELETIONS, (topic, topics)
        assert len(artifact_names(session)) == before - APPLY_DELETIONS
        assert not os.listdir(quarantine), os.listdir(quarantine)[:5]

    return call


@dataclass
class DeleterDir:
    """The apply baseline's directory: as many files as a session, and a trash."""

    count: int
    files: int
    """Descriptor of the directory of files."""
    trash: int
    """Descriptor of the directory each batch's subdirectory is made in."""
    made: int = 0


def deleter_dir(root: str, count: int) -> DeleterDir:
    """Make a directory of `count` empty files beside an empty trash directory."""
    base = os.path.join(root, "deleter", short(count))
    descriptors = []
    for name in ("files", "trash"):
        os.makedirs(os.path.join(base, name), mode=0o700)
        descriptors.append(os.open(os.path.join(base, name), DIR_FLAGS))
    files, trash = descriptors
    for number in range(count):
        filler = f"filler_{number:08d}"
        os.close(os.open(filler, EXCLUSIVE_CREATE, PRIVATE_FILE_MODE, dir_fd=files))
    return DeleterDir(count, files, trash)


def deleter_call(deleter: DeleterDir, body: bytes) -> Callable[[Lap], None]:
    """A contender: apply's directory work alone on 1,000 new files; checked.

    Per batch of `BATCH_CANDIDATES`, as apply does: make a trash subdirectory
    and fsync the trash, rename the files in, fsync it and the directory they
    left, unlink them, fsync the subdirectory, remove it and fsync the trash:
    the five directory fsyncs, no store, no hashing.
    """

    def call(lap: Lap) -> None:
        first = deleter.made
        deleter.made += APPLY_DELETIONS
        names = [f"victim_{n:08d}" for n in range(first, deleter.made)]
        for name in names:
            fd = os.open(
                name, EXCLUSIVE_CREATE, PRIVATE_FILE_MODE, dir_fd=deleter.files
            )
            try:
                assert os.write(fd, body) == len(body)
            finally:
                os.close(fd)
        os.sync()
        with lap.time():
            for start in range(0, len(names), BATCH_CANDIDATES):
                careful_batch(deleter, names[start : start + BATCH_CANDIDATES])
        assert len(os.listdir(deleter.files)) == deleter.count
        assert not os.listdir(deleter.trash)

    return call


def careful_batch(deleter: DeleterDir, names: list[str]) -> None:
    """Delete `names` through a fresh trash subdirectory, five fsyncs in all."""
    batch = names[0]
    os.mkdir(batch, 0o700, dir_fd=deleter.trash)
    os.fsync(deleter.trash)
    fd = os.open(batch, DIR_FLAGS, dir_fd=deleter.trash)
    try:
        for name in names:
            os.rename(name, name, src_dir_fd=deleter.files, dst_dir_fd=fd)
        os.fsync(fd)
        os.fsync(deleter.files)
        for name in names:
            os.unlink(name, dir_fd=fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rmdir(batch, dir_fd=deleter.trash)
    os.fsync(deleter.trash)


def artifact_curves(
    root: str, counts: Sequence[int], args: argparse.Namespace, profiling: Profiling
) -> tuple[list[Curve], list[str]]:
    """Measure (5a), (2) and (5b) on sessions of `counts` artifacts; curves, notes."""
    fixtures = [artifact_session(root, count) for count in counts]
    try:
        ahead = fixtures[0].session.clock.now() + AHEAD
        for fixture in fixtures:
            check_fidelity(fixture, ahead)
        print(
            "(2, 5) every fast-built artifact planned as the one store.store "
            "stored (status, reason, reference count, detail); sample digests "
            "checked"
        )
        curves = [plan_curve(fixtures, ahead, args, profiling)]
        curves += store_curves(fixtures, args, profiling)
        apply, notes = apply_curve(root, fixtures, ahead, args, profiling)
        curves.append(apply)
    finally:
        for fixture in fixtures:
            fixture.session.close()
    return curves, notes


def plan_curve(
    fixtures: list[ArtifactSession],
    ahead: datetime,
    args: argparse.Namespace,
    profiling: Profiling,
) -> Curve:
    """(5a): dry-run plans against find | xargs openssl."""
    command, label = hasher()
    plans = {f.count: plan_call(f, ahead) for f in fixtures}
    contenders: dict[str, Callable[[Lap], None]] = {}
    for fixture in fixtures:
        contenders[f"plan-{fixture.count}"] = plans[fixture.count]
        contenders[f"digest-{fixture.count}"] = digest_call(fixture, command)
    times = interleave(contenders, args.rounds)
    sizes = tuple(plans)
    curve = Curve(
        case="5a GC plan (dry run), every artifact hashed",
        sizes=sizes,
        labels=tuple(map(short, sizes)),
        size_unit="artifacts",
        seconds=stats_of(times, [f"plan-{n}" for n in sizes]),
        per_op=False,
        unit="artifact",
        baseline=stats_of(times, [f"digest-{n}" for n in sizes]),
        baseline_text=f"find|xargs {label}",
    )
    profiling.curve(curve, plans, float)
    return curve


def store_curves(
    fixtures: list[ArtifactSession], args: argparse.Namespace, profiling: Profiling
) -> list[Curve]:
    """(2), and (4c) on the way: the open, the first store after it, and more."""
    body = log_text(STORE_TEXT_BYTES).decode("ascii")
    stores = {f.count: store_call(f, body) for f in fixtures}
    times = interleave({f"store-{n}": call for n, call in stores.items()}, args.rounds)
    sizes = tuple(stores)
    labels = tuple(map(short, sizes))
    text = f"process(~{STORE_TEXT_BYTES // 1000} KB str)"
    curves = []
    for section, case, per in (
        ("first", f"2a store the first artifact after open_session: {text}", 1),
        (MAIN, f"2b store one more artifact, {STORE_OPS} a round: {text}", STORE_OPS),
    ):
        curve = Curve(
            case=case,
            sizes=sizes,
            labels=labels,
            size_unit="artifacts",
            seconds=tuple(
                times.stats(f"store-{n}", section).scaled(1 / per) for n in sizes
            ),
            per_op=True,
            unit="store",
        )
        profiling.curve(curve, stores, lambda _, per=per: per, section)
        curves.append(curve)
    opening = Curve(
        case="4c open_session of a session of artifacts (view saved)",
        sizes=sizes,
        labels=labels,
        size_unit="artifacts",
        seconds=tuple(times.stats(f"store-{n}", "open") for n in sizes),
        per_op=False,
        unit="artifact",
    )
    profiling.curve(opening, stores, float, "open")
    return [*curves, opening]


def apply_curve(
    root: str,
    fixtures: list[ArtifactSession],
    ahead: datetime,
    args: argparse.Namespace,
    profiling: Profiling,
) -> tuple[Curve, list[str]]:
    """(5b): 1,000 deletions in each session; the curve and the plans' note."""
    started = time.perf_counter()
    deleters = [deleter_dir(root, f.count) for f in fixtures]
    print(
        f"(5b) baseline directories of {counts_text([f.count for f in fixtures])} "
        f"empty files made in {time.perf_counter() - started:.1f} s"
    )
    applies = {f.count: apply_call(f, ahead) for f in fixtures}
    contenders: dict[str, Callable[[Lap], None]] = {}
    for fixture, deleter in zip(fixtures, deleters, strict=True):
        contenders[f"apply-{fixture.count}"] = applies[fixture.count]
        contenders[f"deleter-{fixture.count}"] = deleter_call(deleter, fixture.body)
    # The first apply of the run pays for code and directories: untimed.
    run_lap(applies[fixtures[0].count], WARMUP_ROUND, gc_off=False)
    try:
        times = interleave(contenders, args.rounds)
    finally:
        for deleter in deleters:
            os.close(deleter.files)
            os.close(deleter.trash)
        shutil.rmtree(os.path.join(root, "deleter"), ignore_errors=True)
    sizes = tuple(applies)
    curve = Curve(
        case=f"5b GC apply, {APPLY_DELETIONS:,} deletions",
        sizes=sizes,
        labels=tuple(map(short, sizes)),
        size_unit="artifacts",
        seconds=stats_of(times, [f"apply-{n}" for n in sizes], APPLY_DELETIONS),
        per_op=True,
        unit="deletion",
        baseline=stats_of(times, [f"deleter-{n}" for n in sizes], APPLY_DELETIONS),
        baseline_text=f"its dir ops alone, 5 fsyncs/{BATCH_CANDIDATES}",
    )
    note = "5b the plan (dry_run=False) before each apply, median: " + ", ".join(
        f"{short(n)} {duration(times.stats(f'apply-{n}', 'plan').median)}"
        for n in sizes
    )
    profiling.curve(curve, applies, lambda _: APPLY_DELETIONS)
    return curve, [note]


# --------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds of every curve"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: sizes up to {QUICK_MAX_MB} MB and {short(QUICK_MAX_COUNT)}",
    )
    parser.add_argument(
        "--max-mb", type=int, default=None, help="largest spill, MB (1,000)"
    )
    parser.add_argument(
        "--max-count",
        type=int,
        default=None,
        help=f"largest count of artifacts or lease events ({COUNTS[-1]:,})",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile every curve at its smallest and largest size, not just misses",
    )
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    args = parser.parse_args(argv)
    if args.max_mb is None:
        args.max_mb = QUICK_MAX_MB if args.quick else SPILL_MB[-1]
    if args.max_count is None:
        args.max_count = QUICK_MAX_COUNT if args.quick else COUNTS[-1]
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if len(counts_of(args)) < 2:
        parser.error(f"--max-count must allow two of {COUNTS} to fit a slope")
    return args


def counts_of(args: argparse.Namespace) -> list[int]:
    """The counts of artifacts and lease events measured."""
    return [count for count in COUNTS if count <= args.max_count]


def main(argv: list[str] | None = None) -> int:
    """Measure every curve, print the table, clean up."""
    args = parse_args(argv)
    if shutil.which("bash") is None or shutil.which("xargs") is None:
        print("bash, find and xargs are needed for the baselines", file=sys.stderr)
        return 2
    return run_in_temp_dir(bench, args)


def bench(root: str, args: argparse.Namespace) -> int:
    """Measure everything under `root` and print the table."""
    started = time.perf_counter()
    print_host(
        root,
        f"SQLite {sqlite3.sqlite_version}, eventsourcing {version_of('eventsourcing')}",
        f"baselines digest with {hasher()[0]}",
    )
    print(
        f"{args.rounds} rounds of every curve, sizes interleaved, order "
        f"alternating; medians; exponent = least-squares slope of log(time) "
        f"on log(size)"
    )
    profiling = Profiling(every=args.profile, lines=[])
    curves = []
    spill = spill_curve(root, args, profiling)
    if spill is not None:
        curves.append(spill)
    counts = counts_of(args)
    curves += lease_curves(root, counts, args, profiling)
    artifacts, notes = artifact_curves(root, counts, args, profiling)
    curves += artifacts
    curves.sort(key=lambda curve: curve.case)
    print()
    print_table(HEADERS, [curve.row() for curve in curves])
    print()
    for line in [*(curve.note() for curve in curves), *notes, *profiling.lines]:
        print(line)
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
