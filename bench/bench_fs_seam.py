#!/usr/bin/env python3
"""The filesystem seam's overhead: `os.*` called directly against `OS_FILESYSTEM`.

One iteration is a small, fsync-free file life cycle in a temp dir, through a
dir fd: `open(O_CREAT|O_EXCL)`, `write` 64 bytes, `close`, `unlink` — four
cheap syscalls, so any overhead the seam adds shows. The direct loop calls
`os.open` & co. (a module global, as code without a seam would); the seam loop
calls `fs.open` & co. on `OS_FILESYSTEM` passed in as a parameter (as the
project's code does). Rounds interleave the two, alternating which goes first;
the medians (and the median per-round ratio) are shown. A micro-case then
times the call alone with `timeit`: `os.fstat(fd)` against `fs.fstat(fd)`,
and the bare attribute lookups `os.fstat` against `fs.fstat`.

Run from the repository root:

    .venv/bin/python bench/bench_fs_seam.py
    .venv/bin/python bench/bench_fs_seam.py --rounds 5 --iterations 20000
    .venv/bin/python bench/bench_fs_seam.py --dir /dev/shm   # tmpfs: cheaper syscalls

The temp dir (under `--dir`, default the system temp dir) is removed.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit
from typing import TYPE_CHECKING

from spillvault.adapters.storage.fs import OS_FILESYSTEM

from hostfacts import fs_type, load_average

if TYPE_CHECKING:
    from collections.abc import Callable

    from spillvault.domain.ports import FileSystem

# Many short rounds rather than a few long ones: on a small VM the file
# system's background work (journal commits) makes whole rounds slow, and the
# median of many paired rounds shrugs that off.
DEFAULT_ROUNDS = 25
DEFAULT_ITERATIONS = 4_000
TIMEIT_NUMBER = 200_000
TIMEIT_REPEAT = 5
CALLS_PER_ITERATION = 4
FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PAYLOAD = b"x" * 63 + b"\n"
NAME = "seam-bench.tmp"


def direct_loop(dir_fd: int, iterations: int) -> None:
    """Create, write, close and unlink a file `iterations` times with `os`."""
    for _ in range(iterations):
        fd = os.open(NAME, FLAGS, 0o600, dir_fd=dir_fd)
        os.write(fd, PAYLOAD)
        os.close(fd)
        os.unlink(NAME, dir_fd=dir_fd)


def seam_loop(fs: FileSystem, dir_fd: int, iterations: int) -> None:
    """The same life cycle through the seam."""
    for _ in range(iterations):
        fd = fs.open(NAME, FLAGS, 0o600, dir_fd=dir_fd)
        fs.write(fd, PAYLOAD)
        fs.close(fd)
        fs.unlink(NAME, dir_fd=dir_fd)


def timed(run: Callable[[], None], iterations: int) -> float:
    """Run one loop with the collector off; return ns per iteration."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        run()
        end = time.perf_counter_ns()
    finally:
        gc.enable()
    return (end - start) / iterations


def bench_loops(dir_fd: int, rounds: int, iterations: int) -> dict[str, list[float]]:
    """Interleave the two loops for `rounds` rounds after one warm-up round each."""
    runs: dict[str, Callable[[], None]] = {
        "direct": lambda: direct_loop(dir_fd, iterations),
        "seam": lambda: seam_loop(OS_FILESYSTEM, dir_fd, iterations),
    }
    for run in runs.values():
        timed(run, iterations)
    results: dict[str, list[float]] = {"direct": [], "seam": []}
    for round_no in range(rounds):
        order = ("direct", "seam") if round_no % 2 == 0 else ("seam", "direct")
        for name in order:
            results[name].append(timed(runs[name], iterations))
    return results


def bench_micro(fd: int) -> dict[str, list[float]]:
    """Time `os.fstat(fd)` against `fs.fstat(fd)`, and the lookups alone (ns)."""
    names = {"os": os, "fs": OS_FILESYSTEM, "fd": fd}
    cases = {
        "os.fstat(fd)": "os.fstat(fd)",
        "fs.fstat(fd)": "fs.fstat(fd)",
        "os.fstat": "os.fstat",
        "fs.fstat": "fs.fstat",
    }
    results: dict[str, list[float]] = {}
    for label, stmt in cases.items():
        timer = timeit.Timer(stmt, globals=names)
        timer.timeit(TIMEIT_NUMBER // 10)
        totals = timer.repeat(repeat=TIMEIT_REPEAT, number=TIMEIT_NUMBER)
        results[label] = [total / TIMEIT_NUMBER * 1e9 for total in totals]
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run both measurements and print the table."""
    args = parse_args(argv)
    load = load_average()
    with tempfile.TemporaryDirectory(prefix="spillvault-seam-", dir=args.dir) as tmp:
        kind = fs_type(tmp)
        dir_fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            loops = bench_loops(dir_fd, args.rounds, args.iterations)
            micro = bench_micro(dir_fd)
        finally:
            os.close(dir_fd)

    print(
        f"python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load {load}; "
        f"temp dir {tmp} ({kind})"
    )
    print()
    print(
        "open(O_CREAT|O_EXCL) + write 64 B + close + unlink via a dir fd, no fsync: "
        f"{args.rounds} interleaved rounds x {args.iterations} iterations"
    )
    print(f"{'path':<8} {'median ns/iter':>15} {'ns/call':>9} {'min':>8} {'max':>8}")
    for name, values in loops.items():
        median = statistics.median(values)
        print(
            f"{name:<8} {median:>15.0f} {median / CALLS_PER_ITERATION:>9.0f} "
            f"{min(values):>8.0f} {max(values):>8.0f}"
        )
    direct = statistics.median(loops["direct"])
    seam = statistics.median(loops["seam"])
    paired = [s / d for s, d in zip(loops["seam"], loops["direct"], strict=True)]
    ratio = statistics.median(paired)
    print(
        f"seam/direct: {ratio:.4f} (median of per-round ratios; "
        f"{(ratio - 1) * direct:+.0f} ns/iter, "
        f"{(ratio - 1) * direct / CALLS_PER_ITERATION:+.1f} ns/call); "
        f"ratio of medians {seam / direct:.4f}"
    )
    print()
    print(f"timeit, {TIMEIT_REPEAT} repeats x {TIMEIT_NUMBER} (ns per statement)")
    print(f"{'statement':<14} {'median':>8} {'min':>8}")
    for label, values in micro.items():
        print(f"{label:<14} {statistics.median(values):>8.1f} {min(values):>8.1f}")
    call_os = min(micro["os.fstat(fd)"])
    call_fs = min(micro["fs.fstat(fd)"])
    look_os = min(micro["os.fstat"])
    look_fs = min(micro["fs.fstat"])
    print(
        f"fs.fstat(fd)/os.fstat(fd), by min: {call_fs / call_os:.4f} "
        f"({call_fs - call_os:+.1f} ns/call); "
        f"lookup alone: {look_fs - look_os:+.1f} ns"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
