#!/usr/bin/env python3
"""Page faults on a 200 MB artifact: verified page reads and grep (S3.3, S3.4).

Builds a ~200 MB artifact of realistic log text (~3M lines) through the real
`LocalArtifactStore` in a throwaway session, then times

1. `read_artifact(handle, offset=1_000_000, limit=50)` — verified: only the
   chunk(s) holding those lines are read and checked against their digests —
   against the seed's naive reader in this script (read the whole file,
   SHA-256 it, decode, split, slice). Target: >= 400x faster.
2. `grep_artifact(handle, RARE)` for a rare literal over the whole artifact,
   verifying every 1 MiB chunk, against GNU `grep -F -c` and `grep -F -n` run
   as subprocesses on the same file in the same run. Target: <= 2x grep -c.
   For scale, the verification floor: `pread` + SHA-256 of every chunk on one
   thread (a verified scan cannot use less CPU; its threads split it over the
   cores). grep_artifact's CPU time (all its threads) is printed beside it.

Every time is the median of N interleaved rounds (the order alternating) after
one warm-up run of each contender, so the page cache is warm for all of them
(the file was just written and is read once more before timing); the slow
naive reader takes part in the first `--naive-runs` rounds only. Results are
checked against each other: the same page text, the same match count and line
numbers as grep.

Run from the repository root:

    .venv/bin/python bench/bench_page_fault.py
    .venv/bin/python bench/bench_page_fault.py --runs 9 --dir /dev/shm

The session directory (under `--dir`, default the system temp dir) is removed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from spillvault.adapters.services.reader import ArtifactReader
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.artifact_store import LocalArtifactStore
from spillvault.domain.constants import CHUNK_SIZE

from harness import (
    interleave,
    load_average,
    print_host,
    print_table,
    round_by_round,
    verdict,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from harness import Lap, Rounds

TARGET_BYTES = 200 * 1000 * 1000
PAGE_TARGET = 400  # x faster than the naive reader
GREP_TARGET = 2.0  # x grep -F -c's time
PAGE_OFFSET = 1_000_000
PAGE_LIMIT = 50
RARE = "FATAL checksum mismatch on shard-7f3a"
RARE_EVERY = 900_001  # 3 occurrences in ~2.8M lines
LEVELS = (b"INFO", b"INFO", b"INFO", b"DEBUG", b"DEBUG", b"WARN", b"ERROR")
ROUTES = (
    b"GET /api/orders",
    b"POST /api/orders",
    b"GET /api/me",
    b"PUT /api/cart",
    b"GET /healthz",
    b"DELETE /api/session",
)
MESSAGES = (
    b"ok",
    b"cache miss",
    b"retry after timeout",
    b"slow query on replica",
    b"pool exhausted, waiting",
    b"session refreshed",
    b"flag evaluated",
)


def log_lines() -> Iterator[bytes]:
    """Yield ~1 MiB blocks of log text, ~65 bytes a line, until TARGET_BYTES."""
    produced = 0
    line = 0
    block_lines = 16_000
    while produced < TARGET_BYTES:
        parts = []
        for i in range(line, line + block_lines):
            if i and i % RARE_EVERY == 0:
                parts.append(b"03-01 12:00:00 ERROR %s at line %d" % (
                    RARE.encode(), i + 1))  # fmt: skip
                continue
            parts.append(
                b"03-01 %02d:%02d:%02d %s w%02d %s %s %dms rid=%05x"
                % (
                    (i // 3_600_000) % 24,
                    (i // 60_000) % 60,
                    (i // 1000) % 60,
                    LEVELS[i % 7],
                    i % 32,
                    ROUTES[i % 6],
                    MESSAGES[(i * 5 + i // 7) % 7],
                    (i * 2654435761) % 997,
                    (i * 2654435761) & 0xFFFFF,
                )
            )
        block = b"\n".join(parts) + b"\n"
        produced += len(block)
        line += block_lines
        yield block


def naive_page(path: str, expected_sha256: str) -> str:
    """The seed's reader: whole file, whole digest, decode, split, slice."""
    with open(path, "rb") as handle:
        encoded = handle.read()
    if hashlib.sha256(encoded).hexdigest() != expected_sha256:
        msg = "artifact digest mismatch"
        raise RuntimeError(msg)
    lines = encoded.decode("utf-8", errors="replace").split("\n")
    return "\n".join(lines[PAGE_OFFSET : PAGE_OFFSET + PAGE_LIMIT])


def hash_chunks(path: str) -> int:
    """The verification floor: pread and SHA-256 every chunk, on one thread."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = 0
        while data := os.pread(fd, CHUNK_SIZE, chunks * CHUNK_SIZE):
            hashlib.sha256(data).digest()
            chunks += 1
        return chunks
    finally:
        os.close(fd)


def run_grep(flag: str, path: str) -> bytes:
    """Run GNU grep -F with `flag` (-c or -n); exit 1 (no match) is fine."""
    done = subprocess.run(
        ["grep", "-F", flag, RARE, path], capture_output=True, check=False
    )
    if done.returncode not in {0, 1}:
        raise RuntimeError(done.stderr.decode())
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    """Build the artifact, time both comparisons, print the table, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per case")
    parser.add_argument("--naive-runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the temp session goes")
    args = parser.parse_args(argv)
    if shutil.which("grep") is None:
        print("GNU grep not found", file=sys.stderr)
        return 2
    if args.runs < 1 or args.naive_runs < 1:
        parser.error("--runs and --naive-runs must be >= 1")
    root = tempfile.mkdtemp(prefix="spillvault-bench-", dir=args.dir)
    try:
        print_host(root, fsync=False)
        return bench(os.path.join(root, "bench-session"), args.runs, args.naive_runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench(session_dir: str, runs: int, naive_runs: int) -> int:
    """Run the benchmark in a fresh session at `session_dir`."""
    with open_session(session_dir) as session, LocalArtifactStore(session) as store:
        started = time.perf_counter()
        artifact = store.store(log_lines(), source_tool="bench")
        stored_in = time.perf_counter() - started
        content = artifact.stored_content
        assert content is not None
        handle = store.handle_for(artifact.filename)
        path = os.path.join(store.tool_results_dir, artifact.filename)
        reader = ArtifactReader(session, store)
        print(
            f"artifact: {content.size_bytes / 1e6:.1f} MB, "
            f"{content.line_count:,} lines, {len(content.chunk_sha256)} chunks of "
            f"{CHUNK_SIZE // 1024} KiB; stored (hashed, fsynced) in {stored_in:.2f} s"
        )
        print(
            f"median of {runs} interleaved rounds ({naive_runs} for the naive "
            "reader), after a warm-up run of each; page cache warm for all"
        )
        pages: dict[str, str] = {}
        lines: dict[str, list[int]] = {}

        def page(lap: Lap) -> None:
            with lap.time():
                pages["page"] = reader.read_artifact(handle, PAGE_OFFSET, PAGE_LIMIT)

        def naive(lap: Lap) -> None:
            with lap.time():
                pages["naive"] = naive_page(path, content.content_sha256)

        def grep(lap: Lap) -> None:
            cpu = time.process_time()
            with lap.time():
                result = reader.grep_artifact(handle, RARE, max_matches=1000)
            lap.add(time.process_time() - cpu, "cpu")
            lines["ours"] = [m.line_number for m in result.matches]

        def floor(lap: Lap) -> None:
            with lap.time():
                chunks = hash_chunks(path)
            assert chunks == len(content.chunk_sha256)

        def count(lap: Lap) -> None:
            with lap.time():
                counted = run_grep("-c", path)
            lines["count"] = [int(counted)]

        def number(lap: Lap) -> None:
            with lap.time():
                numbered = run_grep("-n", path)
            lines["theirs"] = [int(n.split(b":", 1)[0]) for n in numbered.splitlines()]

        contenders = {
            "page": page,
            "naive": naive,
            "grep": grep,
            "floor": floor,
            "count": count,
            "number": number,
        }
        times = interleave(
            contenders,
            max(runs, naive_runs),
            warmup=True,
            caps={name: naive_runs if name == "naive" else runs for name in contenders},
        )
        assert pages["page"] == pages["naive"], "page differs from the naive reader's"
        ours = lines["ours"]
        assert ours == lines["theirs"], (ours, lines["theirs"])
        assert [len(ours)] == lines["count"], (ours, lines["count"])
        assert ours, "the rare literal should occur"

    report(times, len(ours))
    return 0


def report(times: Rounds, hits: int) -> None:
    """Print the medians, then each ratio with its target and per-round figures."""
    median = {name: times.stats(name).median for name in times.times}
    rows = [
        ("read 50 lines at line 1,000,000 (verified)", median["page"]),
        ("naive: read all + SHA-256 + split + slice", median["naive"]),
        (f"grep_artifact literal, {hits} hits, all chunks verified", median["grep"]),
        ("  its CPU time, all threads", times.stats("grep", "cpu").median),
        ("floor: pread + SHA-256 of every chunk, one thread", median["floor"]),
        ("GNU grep -F -c (subprocess)", median["count"]),
        ("GNU grep -F -n (subprocess)", median["number"]),
    ]
    print()
    print_table(
        ("case", "median"),
        [(name, f"{seconds * 1000:.2f} ms") for name, seconds in rows],
        align="lr",
    )
    print()
    speedup = times.ratio("naive", "page")
    vs_count = times.ratio("grep", "count")
    met = verdict(ok=vs_count.of_medians <= GREP_TARGET)
    print(
        f"page read speed-up vs naive: {speedup.of_medians:,.0f}x  "
        f"(per-round {speedup.per_round:,.0f}x; target >= {PAGE_TARGET}x: "
        f"{verdict(ok=speedup.of_medians >= PAGE_TARGET)})"
    )
    print(
        f"grep_artifact / grep -F -c:  {vs_count.describe()}  "
        f"(target <= {GREP_TARGET:g}x: {met})"
    )
    print(f"grep_artifact / grep -F -n:  {times.ratio('grep', 'number').describe()}")
    print(f"grep_artifact / floor:       {times.ratio('grep', 'floor').describe()}")
    print(f"grep_artifact / grep -F -c by round: {round_by_round(vs_count.rounds)}")
    print(f"load now {load_average()}")


if __name__ == "__main__":
    sys.exit(main())
