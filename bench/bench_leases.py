#!/usr/bin/env python3
"""Lease command throughput: the in-memory store against the durable SQLite store.

For N leases it times `prepare_lease` + `commit_lease` (two saves per lease) on
the in-memory store and on the SQLite store (WAL, synchronous=FULL: strace
shows one fdatasync and ~2.4 WAL pages of 4 KiB per save), in one process, and
prints saves/s, leases/s and SQLite/memory.
A baseline puts the SQLite figure in context: one `os.write` of a ~200-byte line
plus `os.fsync`, per op, into a temp file — the cost floor of one durable append
on this disk. Finally it times reopening: `open_session` on a session holding the
N leases, then `get_lease` of one of them, both stores interleaved. Each of
`--rounds` rounds (default 5) runs memory, SQLite and the baseline back to back
on fresh files, the order alternating; medians are shown, and the ratios are
also given as the median of per-round ratios, which holds up better when the
host's disk speed drifts.

Run from the repository root:

    .venv/bin/python bench/bench_leases.py
    .venv/bin/python bench/bench_leases.py --n 1000       # both stores
    .venv/bin/python bench/bench_leases.py --dir /some/disk  # temp dirs there

Temp dirs go under `--dir` (default: the system temp dir) and are removed. The
fsync figures mean nothing on tmpfs; the table names the file system used.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from datetime import timedelta
from typing import TYPE_CHECKING

from spillvault.adapters.session import Session, open_session
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
    ArtifactSourceId,
)

from harness import interleave, print_host, print_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from harness import Lap, Rounds, Stats

DEFAULT_N_MEMORY = 2000
DEFAULT_N_SQLITE = 500
WARMUP_LEASES = 20
REOPEN_REPEATS = 5
DEFAULT_ROUNDS = 5
SAVES_PER_LEASE = 2
LINE = (b"x" * 199) + b"\n"  # one ~200-byte journal-like line per durable append
SAMPLE = b"FAILED tests/test_gc.py::test_fail_closed - AssertionError\n" * 1000
STORES: dict[str, str | None] = {"memory": "memory", "sqlite": None}
"""Table name -> `open_session(event_store=...)`."""


def sample_claim(session: Session) -> ArtifactRetentionClaim:
    """Build a valid claim on an artifact of `session` (as the demo does)."""
    digest = hashlib.sha256(SAMPLE).hexdigest()
    source = ArtifactSourceId.for_artifact(
        session.session_id, "tool_result_001.txt", digest
    )
    return ArtifactRetentionClaim(str(source), digest)


def run_leases(session: Session, n: int, prefix: str) -> None:
    """Prepare and commit `n` leases."""
    claim = sample_claim(session)
    store = session.store
    now = session.clock.now()
    later = now + timedelta(seconds=1)
    for tx_id in [f"{prefix}-{i:06d}" for i in range(n)]:
        store.prepare_lease(ArtifactLeaseTransaction(tx_id, claim, now))
        store.commit_lease(tx_id, later)


def lease_round(parent: str, event_store: str | None, n: int) -> Callable[[Lap], None]:
    """A contender: `n` leases timed on a fresh session, after a short warm-up."""

    def call(lap: Lap) -> None:
        session_dir = session_path(parent, event_store, lap.round_no)
        with open_session(session_dir, event_store=event_store) as session:
            run_leases(session, WARMUP_LEASES, "warmup")
            with lap.time():
                run_leases(session, n, "lease")

    return call


def session_path(parent: str, event_store: str | None, round_no: int) -> str:
    """Name the session dir of one store's round."""
    return os.path.join(parent, f"bench-{event_store or 'sqlite'}-{round_no}")


def fsync_round(parent: str, ops: int) -> Callable[[Lap], None]:
    """A contender: `ops` durable appends (os.write of a ~200-byte line + fsync)."""

    def call(lap: Lap) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        path = os.path.join(parent, f"baseline-{lap.round_no}.log")
        fd = os.open(path, flags, 0o600)
        try:
            for _ in range(WARMUP_LEASES):
                os.write(fd, LINE)
                os.fsync(fd)
            with lap.time():
                for _ in range(ops):
                    os.write(fd, LINE)
                    os.fsync(fd)
        finally:
            os.close(fd)

    return call


def reopen(session_dir: str, event_store: str | None, n: int) -> Callable[[Lap], None]:
    """A contender: `open_session` (section "open"), then one `get_lease` (main)."""
    target = f"lease-{n // 2:06d}"

    def call(lap: Lap) -> None:
        with lap.time("open"):
            session = open_session(session_dir, event_store=event_store)
        try:
            with lap.time():
                lease = session.store.get_lease(target)
        finally:
            session.close()
        assert lease.state == "committed", lease.state

    return call


def rates(count: int, times: Stats) -> tuple[float, float, float]:
    """Median, lowest and highest rate of `count` ops done in each round."""
    return count / times.median, count / times.high, count / times.low


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n",
        type=int,
        default=None,
        help="leases per store (default: "
        f"{DEFAULT_N_MEMORY} in memory, {DEFAULT_N_SQLITE} on SQLite)",
    )
    parser.add_argument("--n-memory", type=int, default=None, help="leases, memory")
    parser.add_argument("--n-sqlite", type=int, default=None, help="leases, SQLite")
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=f"fresh sessions per store; the median is shown ({DEFAULT_ROUNDS})",
    )
    parser.add_argument("--dir", default=None, help="parent of the temp dirs")
    args = parser.parse_args(argv)
    args.n_memory = args.n_memory or args.n or DEFAULT_N_MEMORY
    args.n_sqlite = args.n_sqlite or args.n or DEFAULT_N_SQLITE
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the three measurements and print the table."""
    args = parse_args(argv)
    counts = {"memory": args.n_memory, "sqlite": args.n_sqlite}
    saves = {name: n * SAVES_PER_LEASE for name, n in counts.items()}
    with tempfile.TemporaryDirectory(prefix="spillvault-bench-", dir=args.dir) as tmp:
        print_host(tmp, f"median of {args.rounds} rounds")
        # Interleaved rounds: the disk's speed drifts on a shared host, and a
        # ratio is only fair between measurements taken close together.
        times = interleave(
            {
                "memory": lease_round(tmp, "memory", args.n_memory),
                "sqlite": lease_round(tmp, None, args.n_sqlite),
                "fsync": fsync_round(tmp, saves["sqlite"]),
            },
            args.rounds,
        )
        last = args.rounds - 1
        reopened = interleave(
            {
                name: reopen(session_path(tmp, store, last), store, counts[name])
                for name, store in STORES.items()
            },
            REOPEN_REPEATS,
        )
    print_report(args, times, reopened)
    return 0


def print_report(args: argparse.Namespace, times: Rounds, reopened: Rounds) -> None:
    """Print the three tables."""
    saves_m = args.n_memory * SAVES_PER_LEASE
    saves_s = args.n_sqlite * SAVES_PER_LEASE
    memory = rates(saves_m, times.stats("memory"))
    sqlite = rates(saves_s, times.stats("sqlite"))
    fsync = rates(saves_s, times.stats("fsync"))
    # Same op count (2 x n_sqlite) in both, so the time ratio is a rate ratio.
    vs_fsync = times.ratio("fsync", "sqlite")
    vs_memory = times.ratio("memory", "sqlite").scaled(saves_s / saves_m)
    print()
    print("prepare_lease + commit_lease (2 saves per lease)")
    rows = [
        (
            name,
            str(n),
            f"{times.stats(name).median:.3f}",
            f"{row[0]:.0f}",
            f"{row[0] / SAVES_PER_LEASE:.0f}",
            f"{row[1]:.0f}-{row[2]:.0f}",
        )
        for name, n, row in (
            ("memory", args.n_memory, memory),
            ("sqlite", args.n_sqlite, sqlite),
        )
    ]
    headers = ("store", "leases", "seconds", "saves/s", "leases/s", "saves/s range")
    print_table(headers, rows, align="lrrrrl")
    sqlite_vs_memory = sqlite[0] / memory[0]
    print(
        f"sqlite/memory saves/s: {sqlite_vs_memory:.3f} (memory "
        f"{1 / sqlite_vs_memory:.1f}x faster); "
        f"median per-round ratio {vs_memory.per_round:.3f}"
    )
    print()
    print("durable-append floor: os.write(~200 B) + os.fsync per op")
    print(
        f"{saves_s} ops in {times.stats('fsync').median:.3f} s: "
        f"{fsync[0]:.0f} ops/s ({1e3 / fsync[0]:.3f} ms/op; "
        f"range {fsync[1]:.0f}-{fsync[2]:.0f})"
    )
    print(
        f"sqlite saves/s / fsync-append ops/s: {sqlite[0] / fsync[0]:.3f}; "
        f"median per-round ratio {vs_fsync.per_round:.3f} "
        f"(rounds: {' '.join(f'{r:.2f}' for r in vs_fsync.rounds)})"
    )
    print()
    print(
        f"reopen (median of {REOPEN_REPEATS}, stores interleaved): open_session, "
        "then get_lease of one"
    )
    rows = []
    for name, n in (("memory", args.n_memory), ("sqlite", args.n_sqlite)):
        open_ms = reopened.stats(name, "open").median * 1e3
        get_ms = reopened.stats(name).median * 1e3
        rows.append(
            (
                name,
                str(n + WARMUP_LEASES),
                f"{open_ms:.3f}",
                f"{get_ms:.3f}",
                f"{open_ms + get_ms:.3f}",
            )
        )
    headers = ("store", "leases", "open ms", "get ms", "total ms")
    print_table(headers, rows, align="lrrrr")


if __name__ == "__main__":
    sys.exit(main())
