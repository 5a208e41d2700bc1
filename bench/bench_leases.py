#!/usr/bin/env python3
"""Lease command throughput: the in-memory store against the durable SQLite store.

For N leases it times `prepare_lease` + `commit_lease` (two saves per lease) on
the in-memory store and on the SQLite store (WAL, synchronous=FULL: strace
shows one fdatasync and ~2.4 WAL pages of 4 KiB per save), in one process, and
prints saves/s, leases/s and SQLite/memory.
A baseline puts the SQLite figure in context: one `os.write` of a ~200-byte line
plus `os.fsync`, per op, into a temp file — the cost floor of one durable append
on this disk. Finally it times reopening: `open_session` on a session holding the
N leases, then `get_lease` of one of them. Each of `--rounds` rounds (default
5) runs memory, SQLite and the baseline back to back on fresh files; medians
are shown, and the ratios are also given as the median of per-round ratios,
which holds up better when the host's disk speed drifts.

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
import platform
import statistics
import sys
import tempfile
import time
from datetime import timedelta

from spillvault.adapters.session import Session, open_session
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
    ArtifactSourceId,
)

from hostfacts import fs_type, load_average

DEFAULT_N_MEMORY = 2000
DEFAULT_N_SQLITE = 500
WARMUP_LEASES = 20
REOPEN_REPEATS = 5
DEFAULT_ROUNDS = 5
SAVES_PER_LEASE = 2
LINE = (b"x" * 199) + b"\n"  # one ~200-byte journal-like line per durable append
SAMPLE = b"FAILED tests/test_gc.py::test_fail_closed - AssertionError\n" * 1000


def sample_claim(session: Session) -> ArtifactRetentionClaim:
    """Build a valid claim on an artifact of `session` (as the demo does)."""
    digest = hashlib.sha256(SAMPLE).hexdigest()
    source = ArtifactSourceId.for_artifact(
        session.session_id, "tool_result_001.txt", digest
    )
    return ArtifactRetentionClaim(str(source), digest)


def run_leases(session: Session, n: int, prefix: str) -> float:
    """Prepare and commit `n` leases; return the elapsed seconds."""
    claim = sample_claim(session)
    store = session.store
    now = session.clock.now()
    later = now + timedelta(seconds=1)
    ids = [f"{prefix}-{i:06d}" for i in range(n)]
    start = time.perf_counter()
    for tx_id in ids:
        store.prepare_lease(ArtifactLeaseTransaction(tx_id, claim, now))
        store.commit_lease(tx_id, later)
    return time.perf_counter() - start


def lease_round(parent: str, event_store: str | None, n: int, round_no: int) -> float:
    """Time `n` leases on a fresh session (after a short warm-up); return seconds."""
    session_dir = session_path(parent, event_store, round_no)
    with open_session(session_dir, event_store=event_store) as session:
        run_leases(session, WARMUP_LEASES, "warmup")
        return run_leases(session, n, "lease")


def session_path(parent: str, event_store: str | None, round_no: int) -> str:
    """Name the session dir of one store's round."""
    return os.path.join(parent, f"bench-{event_store or 'sqlite'}-{round_no}")


def fsync_round(parent: str, ops: int, round_no: int) -> float:
    """Time `ops` durable appends (os.write of a ~200-byte line + os.fsync)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
    fd = os.open(os.path.join(parent, f"baseline-{round_no}.log"), flags, 0o600)
    try:
        for _ in range(WARMUP_LEASES):
            os.write(fd, LINE)
            os.fsync(fd)
        start = time.perf_counter()
        for _ in range(ops):
            os.write(fd, LINE)
            os.fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def reopen(session_dir: str, event_store: str | None, n: int) -> tuple[float, float]:
    """Median ms of `open_session` and of one `get_lease` on a closed session."""
    target = f"lease-{n // 2:06d}"
    opens: list[float] = []
    gets: list[float] = []
    for _ in range(REOPEN_REPEATS):
        start = time.perf_counter()
        session = open_session(session_dir, event_store=event_store)
        opened = time.perf_counter()
        try:
            lease = session.store.get_lease(target)
            done = time.perf_counter()
        finally:
            session.close()
        assert lease.state == "committed", lease.state
        opens.append(opened - start)
        gets.append(done - opened)
    return statistics.median(opens) * 1e3, statistics.median(gets) * 1e3


def rates(count: int, times: list[float]) -> tuple[float, float, float]:
    """Median, lowest and highest rate of `count` ops done in each of `times`."""
    return count / statistics.median(times), count / max(times), count / min(times)


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
    with tempfile.TemporaryDirectory(prefix="spillvault-bench-", dir=args.dir) as tmp:
        kind = fs_type(tmp)
        print(
            f"python {platform.python_version()} on {platform.system()} "
            f"{platform.machine()}, {os.cpu_count()} CPUs, load {load_average()}; "
            f"temp dir {tmp} ({kind}); "
            f"median of {args.rounds} rounds"
        )
        if kind in {"tmpfs", "ramfs"}:
            print("WARNING: fsync is a no-op on this file system; use --dir")
        saves_m = args.n_memory * SAVES_PER_LEASE
        saves_s = args.n_sqlite * SAVES_PER_LEASE
        times: dict[str, list[float]] = {"memory": [], "sqlite": [], "fsync": []}
        # Interleaved rounds: the disk's speed drifts on a shared host, and a
        # ratio is only fair between measurements taken close together.
        for round_no in range(args.rounds):
            times["memory"].append(lease_round(tmp, "memory", args.n_memory, round_no))
            times["sqlite"].append(lease_round(tmp, None, args.n_sqlite, round_no))
            times["fsync"].append(fsync_round(tmp, saves_s, round_no))
        last = args.rounds - 1
        reopened = {
            "memory": reopen(
                session_path(tmp, "memory", last), "memory", args.n_memory
            ),
            "sqlite": reopen(session_path(tmp, None, last), None, args.n_sqlite),
        }

    memory = rates(saves_m, times["memory"])
    sqlite = rates(saves_s, times["sqlite"])
    fsync = rates(saves_s, times["fsync"])
    # Same op count (2 x n_sqlite) in both, so the rate ratio is a time ratio.
    vs_fsync = [f / s for s, f in zip(times["sqlite"], times["fsync"], strict=True)]
    vs_memory = [
        (saves_s / s) / (saves_m / m)
        for s, m in zip(times["sqlite"], times["memory"], strict=True)
    ]
    print()
    print("prepare_lease + commit_lease (2 saves per lease)")
    print(
        f"{'store':<8} {'leases':>7} {'seconds':>8} {'saves/s':>9} "
        f"{'leases/s':>9}  saves/s range"
    )
    for name, n, row in (
        ("memory", args.n_memory, memory),
        ("sqlite", args.n_sqlite, sqlite),
    ):
        print(
            f"{name:<8} {n:>7} {statistics.median(times[name]):>8.3f} "
            f"{row[0]:>9.0f} {row[0] / SAVES_PER_LEASE:>9.0f}  "
            f"{row[1]:.0f}-{row[2]:.0f}"
        )
    ratio = sqlite[0] / memory[0]
    print(
        f"sqlite/memory saves/s: {ratio:.3f} (memory {1 / ratio:.1f}x faster); "
        f"median per-round ratio {statistics.median(vs_memory):.3f}"
    )
    print()
    print("durable-append floor: os.write(~200 B) + os.fsync per op")
    print(
        f"{saves_s} ops in {statistics.median(times['fsync']):.3f} s: "
        f"{fsync[0]:.0f} ops/s ({1e3 / fsync[0]:.3f} ms/op; "
        f"range {fsync[1]:.0f}-{fsync[2]:.0f})"
    )
    print(
        f"sqlite saves/s / fsync-append ops/s: {sqlite[0] / fsync[0]:.3f}; "
        f"median per-round ratio {statistics.median(vs_fsync):.3f} "
        f"(rounds: {' '.join(f'{r:.2f}' for r in vs_fsync)})"
    )
    print()
    print(f"reopen (median of {REOPEN_REPEATS}): open_session, then get_lease of one")
    print(f"{'store':<8} {'leases':>7} {'open ms':>9} {'get ms':>9} {'total ms':>9}")
    for name, n in (("memory", args.n_memory), ("sqlite", args.n_sqlite)):
        open_ms, get_ms = reopened[name]
        print(
            f"{name:<8} {n + WARMUP_LEASES:>7} {open_ms:>9.3f} "
            f"{get_ms:>9.3f} {open_ms + get_ms:>9.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
