"""What every benchmark shares: host facts, interleaved rounds, ratios, the table.

A benchmark names its contenders (the subject and its baselines measured in the
same run) and hands them to `interleave`, which runs them alternately for a
fixed number of rounds, reversing the order every other round, and keeps each
call's wall time (`time.perf_counter`). A contender receives a `Lap`: if it
marks a section with `with lap.time():`, only that is timed (set-up and checks
stay outside); otherwise the whole call is. `Rounds` then gives medians, min
and max (`Stats`) and ratios (`Ratio`: of the medians, and the median of the
per-round ratios, which holds up better when a shared disk drifts).
`print_table` prints the padded table, `print_host` the header line of host
facts (Python, OS, CPUs, load, the temp dir's file system).
"""

from __future__ import annotations

import gc
import io
import os
import platform
import pstats
import shutil
import statistics
import tempfile
import timeit
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from time import perf_counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import cProfile
    import sqlite3
    from collections.abc import Callable, Iterator, Mapping, Sequence

MB = 1000 * 1000
MAIN = "main"
"""The section a `Lap` times by default: the figure a contender stands for."""
WARMUP_ROUND = -1
"""`Lap.round_no` of the untimed warm-up call."""
CASE_HEADERS = ("case", "spillvault", "baseline (same run)", "ratio", "target")
"""The columns of the case tables (one subject, its baseline, ratio, target)."""
NO_FSYNC_FS = frozenset({"tmpfs", "ramfs"})

# ------------------------------------------------------------------ host facts


def load_average() -> str:
    """The 1-minute load average: other work on the host skews every figure."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


def fs_type(path: str) -> str:
    """Name the file system holding `path` (best effort, from /proc/mounts)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            rows = [line.split() for line in mounts]
    except OSError:
        return "unknown"
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    for row in rows:
        if len(row) < 3:
            continue
        mount_point = row[1]
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > len(best):
            best, kind = mount_point, row[2]
    return kind


def version_of(package: str) -> str:
    """The installed version of `package`, or "unknown"."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def host_line(temp_dir: str | None = None, *extras: str) -> str:
    """Python, OS, CPUs, load, `extras`, and the temp dir with its file system."""
    python = (
        f"python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load {load_average()}"
    )
    parts = [python, *extras]
    if temp_dir is not None:
        parts.append(f"temp dir {temp_dir} ({fs_type(temp_dir)})")
    return "; ".join(parts)


def print_host(temp_dir: str | None = None, *extras: str, fsync: bool = True) -> None:
    """Print the host line; warn if the figures are fsync-bound and fsync is a no-op."""
    print(host_line(temp_dir, *extras))
    if fsync and temp_dir is not None and fs_type(temp_dir) in NO_FSYNC_FS:
        print("WARNING: fsync is a no-op on this file system; use --dir")


def print_footer(started: float) -> None:
    """Print the run's total time (since perf_counter `started`) and the load now."""
    print(f"total {perf_counter() - started:.0f} s; load now {load_average()}")


# ------------------------------------------------------------------ statistics


@dataclass(frozen=True)
class Stats:
    """Per-round figures of one contender: median, lowest, highest."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median round."""
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        """The lowest round."""
        return min(self.values)

    @property
    def high(self) -> float:
        """The highest round."""
        return max(self.values)

    def scaled(self, factor: float) -> Stats:
        """The same rounds in another unit (x `factor`: ns per op, ms, ...)."""
        return Stats(tuple(value * factor for value in self.values))


@dataclass(frozen=True)
class Ratio:
    """numerator/denominator over paired rounds: of the medians, and per round."""

    of_medians: float
    rounds: tuple[float, ...]

    @property
    def per_round(self) -> float:
        """The median of the per-round ratios."""
        return statistics.median(self.rounds)

    def scaled(self, factor: float) -> Ratio:
        """The ratio times `factor` (e.g. to turn a time ratio into a rate ratio)."""
        return Ratio(self.of_medians * factor, tuple(r * factor for r in self.rounds))

    def describe(self, spec: str = ".2f") -> str:
        """`1.23x (per-round 1.20x)`."""
        return f"{self.of_medians:{spec}}x (per-round {self.per_round:{spec}}x)"


def ratio(numerator: Sequence[float], denominator: Sequence[float]) -> Ratio:
    """Ratio of the medians and per-round ratios, paired from the first round on."""
    rounds = tuple(n / d for n, d in zip(numerator, denominator, strict=False))
    return Ratio(statistics.median(numerator) / statistics.median(denominator), rounds)


def round_by_round(*columns: Sequence[float], specs: Sequence[str] = ()) -> str:
    """`a/b/c` per round, rounds separated by spaces; one format spec per column."""
    specs = specs or [".2f"] * len(columns)
    return " ".join(
        "/".join(f"{value:{spec}}" for value, spec in zip(row, specs, strict=True))
        for row in zip(*columns, strict=True)
    )


# ---------------------------------------------------------------------- rounds


@dataclass
class Lap:
    """One contender's call in one round: times the sections it marks."""

    round_no: int
    times: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def time(self, section: str = MAIN) -> Iterator[None]:
        """Time the block into `section` (MAIN: the contender's figure); adds up."""
        started = perf_counter()
        yield
        self.add(perf_counter() - started, section)

    def add(self, seconds: float, section: str = MAIN) -> None:
        """Record a time the contender measured itself (e.g. timeit's)."""
        self.times[section] = self.times.get(section, 0.0) + seconds


@dataclass(frozen=True)
class Rounds:
    """Every round's seconds, by contender and section."""

    times: dict[str, dict[str, list[float]]]

    def seconds(self, name: str, section: str = MAIN) -> list[float]:
        """One contender's seconds, round by round."""
        return self.times[name][section]

    def stats(self, name: str, section: str = MAIN) -> Stats:
        """One contender's median, min and max seconds."""
        return Stats(tuple(self.seconds(name, section)))

    def ratio(self, numerator: str, denominator: str) -> Ratio:
        """Time of `numerator` over time of `denominator` (MAIN sections)."""
        return ratio(self.seconds(numerator), self.seconds(denominator))


def run_lap(call: Callable[[Lap], object], round_no: int, *, gc_off: bool) -> Lap:
    """Call a contender once; MAIN is the whole call unless it timed a section."""
    lap = Lap(round_no)
    if gc_off:
        gc.collect()
        gc.disable()
    try:
        started = perf_counter()
        call(lap)
        elapsed = perf_counter() - started
    finally:
        if gc_off:
            gc.enable()
    if MAIN not in lap.times:
        lap.add(elapsed)
    return lap


def interleave(
    contenders: Mapping[str, Callable[[Lap], object]],
    rounds: int,
    *,
    warmup: bool = False,
    gc_off: bool = False,
    caps: Mapping[str, int] | None = None,
) -> Rounds:
    """Run the contenders alternately for `rounds` rounds, reversed every other one.

    `warmup` calls each once untimed first (code, binaries, page cache);
    `gc_off` collects before each call and keeps the collector off during it;
    `caps` limits a slow contender to its first so many rounds.
    """
    caps = caps or {}
    if warmup:
        for call in contenders.values():
            run_lap(call, WARMUP_ROUND, gc_off=gc_off)
    times: dict[str, dict[str, list[float]]] = {name: {} for name in contenders}
    order = list(contenders)
    for round_no in range(rounds):
        for name in order if round_no % 2 == 0 else order[::-1]:
            if round_no >= caps.get(name, rounds):
                continue
            lap = run_lap(contenders[name], round_no, gc_off=gc_off)
            for section, seconds in lap.times.items():
                times[name].setdefault(section, []).append(seconds)
    return Rounds(times)


def micro(
    cases: Mapping[str, tuple[str, Mapping[str, object]]],
    repeat: int,
    *,
    number: int | None = None,
    budget: float = 0.04,
) -> dict[str, Stats]:
    """ns per execution of each timeit statement, over `repeat` interleaved rounds.

    Each case runs `number` times a round, or (None) as many as fill `budget`
    seconds, calibrated with `autorange`; both warm up first.
    """
    contenders = {}
    numbers = {}
    for label, (stmt, names) in cases.items():
        timer = timeit.Timer(stmt, globals=dict(names))
        if number is None:
            count, seconds = timer.autorange()
            numbers[label] = max(1, int(count * budget / max(seconds, 1e-9)))
        else:
            timer.timeit(max(1, number // 10))
            numbers[label] = number
        contenders[label] = timeit_call(timer, numbers[label])
    rounds = interleave(contenders, repeat)
    return {label: rounds.stats(label).scaled(1e9 / numbers[label]) for label in cases}


def timeit_call(timer: timeit.Timer, number: int) -> Callable[[Lap], None]:
    """A contender: `number` runs of `timer`, timed by timeit itself."""

    def call(lap: Lap) -> None:
        lap.add(timer.timeit(number))

    return call


# ----------------------------------------------------------------------- table


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = ""
) -> None:
    """Print rows under headers, columns padded; `align` is l/r per column (l)."""
    table = [headers, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    aligns = align.ljust(len(headers), "l")
    for row in table:
        cells = zip(row, widths, aligns, strict=True)
        print(
            "  ".join(
                cell.rjust(width) if side == "r" else cell.ljust(width)
                for cell, width, side in cells
            ).rstrip()
        )


def verdict(*, ok: bool) -> str:
    """Say whether a target was met."""
    return "ok" if ok else "MISSED"


def mbps(size: float, seconds: float) -> str:
    """Format a throughput."""
    return f"{size / seconds / MB:,.0f} MB/s"


def print_profile(
    profiler: cProfile.Profile,
    what: str,
    top: int,
    orders: Sequence[str] = ("cumulative", "tottime"),
) -> None:
    """Print the top entries of a profile, by each of `orders`."""
    for order in orders:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.strip_dirs().sort_stats(order).print_stats(top)
        lines = out.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "ncalls" in line)
        total = next((line for line in lines if "function calls" in line), "")
        print(f"\ncProfile, {what}, top {top} by {order}: {total.strip()}")
        print("\n".join(line for line in lines[start:] if line.strip()))


# -------------------------------------------------------------------- fixtures


def parse_digests(out: str) -> dict[str, str]:
    """File name -> digest from openssl (`X(path)= hex`) or sha256sum output."""
    digests = {}
    for line in out.splitlines():
        if ")= " in line:
            path, _, digest = line.rpartition("= ")
            path = path[path.index("(") + 1 : -1]
        else:
            digest, _, path = line.partition("  ")
        digests[os.path.basename(path)] = digest.strip()
    return digests


SQLITE_ROW = "x" * 200
"""The payload of one baseline SQLite op: about a lease event's size."""


def insert_commit(connection: sqlite3.Connection) -> None:
    """One durable op: BEGIN, INSERT one small row into `ops`, COMMIT."""
    connection.execute("BEGIN")
    connection.execute("INSERT INTO ops (payload) VALUES (?)", (SQLITE_ROW,))
    connection.execute("COMMIT")


def fsync_path(path: str) -> None:
    """fsync one file or directory."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str) -> None:
    """fsync every file and directory under `root`, and `root`'s parent."""
    for here, _dirs, files in os.walk(root):
        for name in [*files, "."]:
            fsync_path(os.path.join(here, name))
    fsync_path(os.path.dirname(root))


def restore(template: str, path: str) -> None:
    """Replace whatever is at `path` by a durable copy of `template`."""
    # Closed sessions must be gone first: the session lock is found by the
    # directory's inode, which the copy may reuse.
    gc.collect()
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(template, path, symlinks=True)
    fsync_tree(path)


def run_in_temp_dir(bench: Callable[[str, Any], int], args: Any) -> int:
    """Run `bench(root, args)` in a fresh temp dir under `args.dir`; remove it after."""
    root = tempfile.mkdtemp(prefix="spillvault-bench-", dir=args.dir)
    try:
        return bench(root, args)
    finally:
        gc.collect()  # close what the bench left open before its files go
        shutil.rmtree(root, ignore_errors=True)
