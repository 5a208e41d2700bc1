#!/usr/bin/env python3
"""The filesystem seam's overhead: `os.*` called directly against `OS_FILESYSTEM`.

One iteration is a small, fsync-free file life cycle in a temp dir, through a
dir fd: `open(O_CREAT|O_EXCL)`, `write` 64 bytes, `close`, `unlink` — four
cheap syscalls, so any overhead the seam adds shows. The direct loop calls
`os.open` & co. (a module global, as code without a seam would); the seam loop
calls `fs.open` & co. on `OS_FILESYSTEM` passed in as a parameter (as the
project's code does). Rounds interleave the two, alternating which goes first,
after one warm-up run of each, with the collector off while a loop runs; the
medians (and the median per-round ratio) are shown. A micro-case then times the
call alone with `timeit`, in interleaved repeats: `os.fstat(fd)` against
`fs.fstat(fd)`, and the bare attribute lookups `os.fstat` against `fs.fstat`.

Run from the repository root:

    .venv/bin/python bench/bench_fs_seam.py
    .venv/bin/python bench/bench_fs_seam.py --rounds 5 --iterations 20000
    .venv/bin/python bench/bench_fs_seam.py --dir /dev/shm   # tmpfs: cheaper syscalls

The temp dir (under `--dir`, default the system temp dir) is removed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import TYPE_CHECKING

from spillvault.adapters.storage.fs import OS_FILESYSTEM

from harness import Lap, Stats, interleave, micro, print_host, print_table

if TYPE_CHECKING:
    from spillvault.domain.ports import FileSystem

    from harness import Ratio

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


def bench_loops(
    dir_fd: int, rounds: int, iterations: int
) -> tuple[dict[str, Stats], Ratio]:
    """ns per iteration of both loops over interleaved rounds, and seam/direct."""

    def direct(_lap: Lap) -> None:
        direct_loop(dir_fd, iterations)

    def seam(_lap: Lap) -> None:
        seam_loop(OS_FILESYSTEM, dir_fd, iterations)

    timed = interleave(
        {"direct": direct, "seam": seam}, rounds, warmup=True, gc_off=True
    )
    per_iteration = 1e9 / iterations
    loops = {name: timed.stats(name).scaled(per_iteration) for name in timed.times}
    return loops, timed.ratio("seam", "direct")


def bench_micro(fd: int) -> dict[str, Stats]:
    """Time `os.fstat(fd)` against `fs.fstat(fd)`, and the lookups alone (ns)."""
    names = {"os": os, "fs": OS_FILESYSTEM, "fd": fd}
    statements = ("os.fstat(fd)", "fs.fstat(fd)", "os.fstat", "fs.fstat")
    cases = {stmt: (stmt, names) for stmt in statements}
    return micro(cases, TIMEIT_REPEAT, number=TIMEIT_NUMBER)


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
    with tempfile.TemporaryDirectory(prefix="spillvault-seam-", dir=args.dir) as tmp:
        print_host(tmp, fsync=False)
        dir_fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            loops, ratio = bench_loops(dir_fd, args.rounds, args.iterations)
            calls = bench_micro(dir_fd)
        finally:
            os.close(dir_fd)

    print()
    print(
        "open(O_CREAT|O_EXCL) + write 64 B + close + unlink via a dir fd, no fsync: "
        f"{args.rounds} interleaved rounds x {args.iterations} iterations"
    )
    print_table(
        ("path", "median ns/iter", "ns/call", "min", "max"),
        [
            (
                name,
                f"{stats.median:.0f}",
                f"{stats.median / CALLS_PER_ITERATION:.0f}",
                f"{stats.low:.0f}",
                f"{stats.high:.0f}",
            )
            for name, stats in loops.items()
        ],
        align="lrrrr",
    )
    extra = (ratio.per_round - 1) * loops["direct"].median
    print(
        f"seam/direct: {ratio.per_round:.4f} (median of per-round ratios; "
        f"{extra:+.0f} ns/iter, {extra / CALLS_PER_ITERATION:+.1f} ns/call); "
        f"ratio of medians {ratio.of_medians:.4f}"
    )
    print()
    print(
        f"timeit, {TIMEIT_REPEAT} interleaved repeats x {TIMEIT_NUMBER} "
        "(ns per statement)"
    )
    print_table(
        ("statement", "median", "min"),
        [
            (label, f"{stats.median:.1f}", f"{stats.low:.1f}")
            for label, stats in calls.items()
        ],
        align="lrr",
    )
    call_os = calls["os.fstat(fd)"].low
    call_fs = calls["fs.fstat(fd)"].low
    lookup = calls["fs.fstat"].low - calls["os.fstat"].low
    print(
        f"fs.fstat(fd)/os.fstat(fd), by min: {call_fs / call_os:.4f} "
        f"({call_fs - call_os:+.1f} ns/call); lookup alone: {lookup:+.1f} ns"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
