#!/usr/bin/env python3
"""MCP spill proxy cost: added latency, huge results end to end, peak RSS (issue 16).

`spillvault mcp proxy -- node server-filesystem ROOT` (the npm reference
server of tests/npm) against a direct connection to the same server, in the
same run. Both are driven by the same minimal raw JSON-RPC client: one line
written to the child's stdin, `readline()` on its stdout (linear in the line's
size), notifications skipped until the response with the request's id. A
reply is timed from the request's write to the response line read; parsing it
comes after the clock stops (and is shown for the direct reads). The SDK's
client is left out of (1) and (2): its stdio reader is quadratic in a line's
size and its overhead would blur the comparison; (3) shows that cost.

1. Latency added to a small call: `--calls` (1,000) `tools/call`s of
   `read_text_file` on a 200-byte file, through the proxy and direct, both
   connections open at once, in batches of `--batch` (50) alternating between
   the two (the order reversed every other round), after 50 untimed calls each.
   Median and p99 of every call. Goal: median added <= 2 ms, or proxied
   median <= 1.2x direct.
2. Huge results end to end: a `--sizes` (1,5,20,50) MB log file each
   (deterministic text, fsynced), read with `read_text_file`. The server sends
   the text twice (`content` and `structuredContent`) with newlines and quotes
   escaped, so the message is a little over twice the file. Contenders, in
   `--rounds` (5) interleaved rounds after an untimed warm-up: through the
   proxy (it parses the line, stores the text as a SHA-256-verified artifact,
   fsynced, and relays a ~30,000-char preview), direct (the upstream's own
   time: the server reads the file and serializes the message, the client
   reads the line), and `cat FILE > /dev/null && openssl dgst -sha256 FILE`
   (reading and hashing the bytes once). Time per MB shows the growth: about
   linear if the largest size's s/MB is <= 1.5x that of the smallest size of
   at least 5 MB. A fresh proxy (and direct server) per size; the proxy's peak
   RSS is its VmHWM (/proc/PID/status), read after its first call and again
   after the last, just before its stdin is closed (with the RSS it still
   holds then). Goal: peak RSS over all the calls <= 2.5x the largest message
   + 100 MB.
3. For information, the SDK's own client (`stdio_client` + `ClientSession`),
   one call each, on the sizes of (2) up to `--sdk-max-mb` (20): direct (the
   whole message through its quadratic reader) and through the proxy (only the
   preview reaches it). A size is skipped when the previous one's time,
   scaled quadratically, predicts more than 60 s.

Run from the repository root:

    .venv/bin/python bench/bench_mcp_proxy.py
    .venv/bin/python bench/bench_mcp_proxy.py --calls 200 --sizes 1,5 --rounds 1
    .venv/bin/python bench/bench_mcp_proxy.py --sdk-max-mb 0 --dir /some/disk

Everything goes in a temp dir under `--dir` (default: the system temp dir),
which is removed; $SPILLVAULT_HOME points into it, so the proxy's session is
made there. The artifact is fsynced: figures from tmpfs say little.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import anyio

from harness import (
    MB,
    fsync_path,
    interleave,
    print_footer,
    print_host,
    print_table,
    round_by_round,
    run_in_temp_dir,
    verdict,
    version_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from harness import Lap, Rounds

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS = os.path.join(REPO, "tests", "npm", "node_modules", "@modelcontextprotocol")
FILESYSTEM_SERVER = os.path.join(SERVERS, "server-filesystem", "dist", "index.js")
PROTOCOL_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "bench_mcp_proxy", "version": "1"}
READ_TOOL = "read_text_file"
HANDLES_META = "io.spillvault/handles"
DEFAULT_CALLS = 1000
DEFAULT_BATCH = 50
WARMUP_CALLS = 50
DEFAULT_SIZES = "1,5,20,50"
DEFAULT_ROUNDS = 5
DEFAULT_SDK_MAX_MB = 20.0
SDK_BUDGET_SECONDS = 60.0
SDK_HARD_LIMIT_SECONDS = 180.0
ADDED_MS_TARGET = 2.0
LATENCY_RATIO_TARGET = 1.2
RSS_FACTOR = 2.5
RSS_SLACK_MB = 100.0
LINEAR_RATIO = 1.5
LINEAR_FROM_MB = 5.0
PREVIEW_BOUND = 30_000  # chars of the client's text block (the proxy's limit)
CLOSE_SECONDS = 10.0

# ------------------------------------------------------------------ log text

LEVELS = (b"INFO", b"INFO", b"INFO", b"DEBUG", b"DEBUG", b"WARN", b"INFO", b"ERROR")
SERVICES = (b"api", b"billing", b"search", b"auth", b"cart", b"gateway")
ROUTES = (
    b"GET /api/orders",
    b"POST /api/orders",
    b"GET /api/me",
    b"PUT /api/cart/items",
    b"GET /healthz",
    b"DELETE /api/session",
    b"GET /api/search?q=shoes",
)
MESSAGES = (
    b'msg="request served"',
    b'msg="cache miss" key=user:profile',
    b'msg="retry after timeout" attempt=2',
    b'msg="slow query on replica" table=orders',
    b'msg="pool exhausted, waiting"',
    b'msg="session refreshed"',
    b'msg="upstream returned 502" upstream=billing:8443',
    b'msg="flag evaluated" flag=new-checkout',
)


def log_blocks() -> Iterator[bytes]:
    """Yield endless ~1 MB blocks of log text, ~120 bytes a line, deterministic."""
    block_lines = 8_000
    for start in itertools.count(0, block_lines):
        lines = []
        for i in range(start, start + block_lines):
            mix = (i * 2654435761) & 0xFFFFFFFF
            lines.append(
                b"2026-03-01T%02d:%02d:%02d.%03dZ %-5s [%s-%02d] %s %d %dms %s "
                b"trace=%08x"
                % (
                    (i // 3_600_000) % 24,
                    (i // 60_000) % 60,
                    (i // 1000) % 60,
                    i % 1000,
                    LEVELS[i % 8],
                    SERVICES[i % 6],
                    i % 16,
                    ROUTES[(i * 3) % 7],
                    (200, 200, 200, 201, 304, 404, 500)[mix % 7],
                    mix % 2000,
                    MESSAGES[(i * 5 + i // 11) % 8],
                    mix,
                )
            )
        yield b"\n".join(lines) + b"\n"


def write_log(path: str, size: int) -> str:
    """Write ~`size` bytes of log text (cut at a line end), fsynced; its SHA-256."""
    digest = hashlib.sha256()
    written = 0
    with open(path, "wb") as out:
        for whole in log_blocks():
            block = whole
            if written + len(block) > size:
                block = block[: block.rfind(b"\n", 0, size - written) + 1]
            out.write(block)
            digest.update(block)
            written += len(block)
            if written >= size or not block:
                break
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest()


# ------------------------------------------------------------ raw MCP client


@dataclass(frozen=True)
class Reply:
    """One response: seconds from write to line read, seconds to parse, its size."""

    seconds: float
    parse_seconds: float
    size: int
    message: dict[str, Any]


class RawClient:
    """A minimal JSON-RPC client of one stdio MCP server: lines over pipes."""

    def __init__(
        self, name: str, command: Sequence[str], env: dict[str, str], log: str
    ) -> None:
        self.name = name
        self.log = log
        self._ids = itertools.count(1)
        with open(log, "ab") as err:
            self.process = subprocess.Popen(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._in: IO[bytes] = self.process.stdin
        self._out: IO[bytes] = self.process.stdout

    def initialize(self) -> None:
        """The handshake: `initialize`, then `notifications/initialized`."""
        reply = self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": CLIENT_INFO,
            },
        )
        assert "result" in reply.message, reply.message
        self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Reply:
        """`tools/call`; the result must not be an error."""
        reply = self.request("tools/call", {"name": name, "arguments": arguments})
        result = reply.message.get("result")
        assert isinstance(result, dict), f"{self.name}: {reply.message}"
        assert result.get("isError") is not True, f"{self.name}: {result}"
        return reply

    def request(self, method: str, params: dict[str, Any]) -> Reply:
        """Send a request; read lines until its response, timing the wait."""
        request_id = next(self._ids)
        started = time.perf_counter()
        self._write(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        )
        while True:
            line = self._out.readline()
            received = time.perf_counter()
            if not line:
                msg = f"{self.name} closed its stdout; its log:\n{self.log_tail()}"
                raise RuntimeError(msg)
            message = json.loads(line)
            parsed = time.perf_counter()
            is_response = isinstance(message, dict) and "method" not in message
            if is_response and message.get("id") == request_id:
                return Reply(received - started, parsed - received, len(line), message)

    def _write(self, message: dict[str, Any]) -> None:
        self._in.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self._in.flush()

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the child's stderr."""
        with open(self.log, "rb") as err:
            return err.read()[-chars:].decode(errors="replace")

    def close(self) -> None:
        """Close the child's stdin and wait for it; TERM, then KILL, if it lingers."""
        self._in.close()
        for stop in (None, self.process.terminate, self.process.kill):
            if stop is not None:
                stop()
            try:
                self.process.wait(timeout=CLOSE_SECONDS)
            except subprocess.TimeoutExpired:
                continue
            break
        self._out.close()


def print_markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a markdown table, columns padded."""

    def cells(row: Sequence[str]) -> list[str]:
        return [f"| {cell}" for cell in row[:-1]] + [f"| {row[-1]} |"]

    ruler = ["---"] * len(headers)
    print_table(cells(headers), [cells(ruler), *(cells(row) for row in rows)])


def status_kib(pid: int, field: str) -> int:
    """A `kB` field of /proc/PID/status (VmHWM, VmRSS), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def children(pid: int) -> list[int]:
    """The child processes of `pid` (from /proc/PID/task/*/children)."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as kids:
                found += [int(word) for word in kids.read().split()]
        except OSError:
            continue
    return found


def spillvault_command() -> list[str]:
    """The `spillvault` script next to this Python (the venv's)."""
    here = os.path.join(os.path.dirname(sys.executable), "spillvault")
    found = here if os.path.exists(here) else shutil.which("spillvault")
    if found is None:
        msg = "spillvault is not installed next to this Python nor on PATH"
        raise RuntimeError(msg)
    return [found]


@dataclass(frozen=True)
class Setup:
    """Commands and environment shared by every measurement."""

    root: str
    files: str
    env: dict[str, str]
    logs: str

    @property
    def direct(self) -> list[str]:
        """The upstream server, run directly."""
        return ["node", FILESYSTEM_SERVER, self.files]

    @property
    def proxied(self) -> list[str]:
        """The same server behind `spillvault mcp proxy`."""
        return [*spillvault_command(), "mcp", "proxy", "--", *self.direct]

    def client(self, name: str, *, proxy: bool) -> RawClient:
        """Start one connection and shake hands."""
        command = self.proxied if proxy else self.direct
        log = os.path.join(self.logs, f"{name}.log")
        client = RawClient(name, command, self.env, log)
        client.initialize()
        return client


# ------------------------------------------------------- 1. small-call latency


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def small_calls(
    client: RawClient, path: str, expected: str, count: int, into: list[float]
) -> Callable[[Lap], None]:
    """A contender: `count` calls, each call's seconds appended to `into`."""

    def call(lap: Lap) -> None:
        for _ in range(count):
            reply = client.call_tool(READ_TOOL, {"path": path})
            text = reply.message["result"]["content"][0]["text"]
            assert text == expected, (client.name, text[:200])
            if lap.round_no >= 0:
                into.append(reply.seconds)
            lap.add(reply.seconds)

    return call


@dataclass(frozen=True)
class Latency:
    """Per-call seconds of both connections, and the batch rounds."""

    direct: list[float]
    proxied: list[float]
    rounds: Rounds


def latency(setup: Setup, calls: int, batch: int) -> Latency:
    """Time `calls` small calls each way, in alternating batches."""
    path = os.path.join(setup.files, "tiny.log")
    data = next(log_blocks())[:200]
    data = data[: data.rfind(b"\n") + 1]
    with open(path, "wb") as out:
        out.write(data)
    expected = data.decode()
    direct = setup.client("latency-direct", proxy=False)
    proxied = setup.client("latency-proxy", proxy=True)
    times: dict[str, list[float]] = {"direct": [], "proxied": []}
    try:
        for client in (direct, proxied):  # JIT, imports, the proxy's tools/list
            for _ in range(WARMUP_CALLS):
                client.call_tool(READ_TOOL, {"path": path})
        contenders = {
            name: small_calls(client, path, expected, batch, times[name])
            for name, client in (("direct", direct), ("proxied", proxied))
        }
        rounds = interleave(contenders, max(1, calls // batch), gc_off=True)
    finally:
        direct.close()
        proxied.close()
    return Latency(times["direct"], times["proxied"], rounds)


def latency_report(result: Latency, calls: int, batch: int) -> None:
    """Print (1)'s table and verdict."""
    d_med = statistics.median(result.direct) * 1000
    p_med = statistics.median(result.proxied) * 1000
    d_p99 = percentile(result.direct, 99) * 1000
    p_p99 = percentile(result.proxied, 99) * 1000
    d_mean = statistics.fmean(result.direct) * 1000
    p_mean = statistics.fmean(result.proxied) * 1000
    per_batch = result.rounds.ratio("proxied", "direct")
    rows = [
        ("median", d_med, p_med),
        ("p99", d_p99, p_p99),
        ("mean", d_mean, p_mean),
        ("min", min(result.direct) * 1000, min(result.proxied) * 1000),
    ]
    print(
        f"## 1. Small tools/call ({READ_TOOL}, 200-byte file): "
        f"{len(result.direct)} calls each way, batches of {batch}, alternating"
    )
    print()
    print_markdown(
        ("stat", "direct (same run)", "through proxy", "added", "ratio"),
        [
            (
                f"{stat}",
                f"{d:.3f} ms",
                f"{p:.3f} ms",
                f"{p - d:+.3f} ms",
                f"{p / d:.2f}x",
            )
            for stat, d, p in rows
        ],
    )
    print()
    print(f"per-batch ratio of the sums (proxied/direct): {per_batch.describe()}")
    added = p_med - d_med
    ok = added <= ADDED_MS_TARGET or p_med / d_med <= LATENCY_RATIO_TARGET
    print(
        f"VERDICT (1) median added <= {ADDED_MS_TARGET:g} ms or <= "
        f"{LATENCY_RATIO_TARGET}x direct: {verdict(ok=ok)} ({added:+.3f} ms, "
        f"{p_med / d_med:.2f}x; p99 {d_p99:.3f} -> {p_p99:.3f} ms)"
    )
    if len(result.direct) != calls:
        print(f"(calls rounded down to whole batches: {len(result.direct)})")


# ------------------------------------------------------- 2. huge results


@dataclass
class SizeFacts:
    """One size's measurements."""

    size_mb: float
    file_bytes: int
    message_bytes: int = 0
    proxied_reply_bytes: int = 0
    preview_chars: int = 0
    proxy_rss_start_kib: int = 0
    proxy_hwm_first_kib: int = 0
    proxy_hwm_kib: int = 0
    proxy_rss_end_kib: int = 0
    upstream_hwm_kib: int = 0
    direct_hwm_kib: int = 0
    rounds: Rounds | None = None


def read_direct(
    client: RawClient, path: str, digest: str, facts: SizeFacts
) -> Callable[[Lap], None]:
    """A contender: the whole text over the direct connection, checked."""

    def call(lap: Lap) -> None:
        reply = client.call_tool(READ_TOOL, {"path": path})
        lap.add(reply.seconds)
        lap.add(reply.parse_seconds, "parse")
        text = reply.message["result"]["content"][0]["text"]
        assert len(text) == facts.file_bytes, (len(text), facts.file_bytes)
        assert hashlib.sha256(text.encode()).hexdigest() == digest
        facts.message_bytes = reply.size

    return call


def read_proxied(
    client: RawClient, path: str, facts: SizeFacts
) -> Callable[[Lap], None]:
    """A contender: the same read through the proxy; the client gets a preview."""

    def call(lap: Lap) -> None:
        reply = client.call_tool(READ_TOOL, {"path": path})
        lap.add(reply.seconds)
        result = reply.message["result"]
        texts = [b["text"] for b in result["content"] if b.get("type") == "text"]
        handles = result.get("_meta", {}).get(HANDLES_META, {})
        assert "content" in handles, result.get("_meta")
        assert sum(map(len, texts)) <= PREVIEW_BOUND, sum(map(len, texts))
        facts.proxied_reply_bytes = reply.size
        facts.preview_chars = sum(map(len, texts))
        if not facts.proxy_hwm_first_kib:  # the peak of a first huge result
            facts.proxy_hwm_first_kib = status_kib(client.process.pid, "VmHWM")

    return call


def shell_read(path: str, digest: str) -> Callable[[Lap], None]:
    """A contender: `cat FILE > /dev/null && openssl dgst -sha256 FILE`."""
    script = 'cat "$1" > /dev/null && openssl dgst -sha256 "$1"'

    def call(lap: Lap) -> None:
        with lap.time():
            done = subprocess.run(
                ["bash", "-c", script, "bash", path],
                capture_output=True,
                check=True,
            )
        assert digest in done.stdout.decode(), done.stdout

    return call


def huge_result(setup: Setup, size_mb: float, rounds: int) -> SizeFacts:
    """Write the file, time the three contenders on it, read the peak RSS."""
    path = os.path.join(setup.files, f"log-{size_mb:g}MB.log")
    digest = write_log(path, int(size_mb * MB))
    facts = SizeFacts(size_mb, os.path.getsize(path))
    direct = setup.client(f"huge-{size_mb:g}-direct", proxy=False)
    proxied = setup.client(f"huge-{size_mb:g}-proxy", proxy=True)
    facts.proxy_rss_start_kib = status_kib(proxied.process.pid, "VmRSS")
    try:
        contenders = {
            "proxied": read_proxied(proxied, path, facts),
            "direct": read_direct(direct, path, digest, facts),
            "shell": shell_read(path, digest),
        }
        facts.rounds = interleave(contenders, rounds, warmup=True)
        facts.proxy_hwm_kib = status_kib(proxied.process.pid, "VmHWM")
        facts.proxy_rss_end_kib = status_kib(proxied.process.pid, "VmRSS")
        upstream = children(proxied.process.pid)
        facts.upstream_hwm_kib = max(
            (status_kib(pid, "VmHWM") for pid in upstream), default=0
        )
        facts.direct_hwm_kib = status_kib(direct.process.pid, "VmHWM")
    finally:
        direct.close()
        proxied.close()
    return facts


def mb_of(kib: int) -> float:
    """KiB (as /proc gives them) in MB."""
    return kib * 1024 / MB


def per_mb_ms(seconds: float, size_bytes: int) -> float:
    """Milliseconds per MB."""
    return seconds * 1000 / (size_bytes / MB)


def linear_check(facts: list[SizeFacts], name: str) -> tuple[bool, str]:
    """Largest size's ms/MB over the smallest's (of those >= 5 MB, if two are)."""
    big = [f for f in facts if f.size_mb >= LINEAR_FROM_MB]
    pool = big if len(big) >= 2 else facts
    if len(pool) < 2:
        return True, "one size only: growth not checked"
    small, large = pool[0], pool[-1]
    assert small.rounds is not None
    assert large.rounds is not None
    first = per_mb_ms(small.rounds.stats(name).median, small.file_bytes)
    last = per_mb_ms(large.rounds.stats(name).median, large.file_bytes)
    ok = last / first <= LINEAR_RATIO
    note = (
        f"{last:.1f} ms/MB at {large.size_mb:g} MB vs {first:.1f} at "
        f"{small.size_mb:g} MB = {last / first:.2f}x"
    )
    return ok, note


def huge_report(facts: list[SizeFacts], rounds: int) -> None:
    """Print (2)'s tables and verdicts."""
    print(
        f"## 2. {READ_TOOL} of a large log file: median of {rounds} rounds after "
        "a warm-up, order alternating; fresh proxy and server per size"
    )
    print()
    headers = (
        "file",
        "message",
        "cat+openssl",
        "direct (upstream)",
        "+client parse",
        "proxied",
        "proxied/direct",
        "proxied/cat+openssl",
        "ms/MB direct",
        "ms/MB proxied",
    )
    rows = []
    for f in facts:
        assert f.rounds is not None
        med = {n: f.rounds.stats(n).median for n in ("proxied", "direct", "shell")}
        parse = f.rounds.stats("direct", "parse").median
        vs_direct = f.rounds.ratio("proxied", "direct")
        vs_shell = f.rounds.ratio("proxied", "shell")
        rows.append(
            (
                f"{f.file_bytes / MB:.1f} MB",
                f"{f.message_bytes / MB:.1f} MB",
                f"{med['shell'] * 1000:,.0f} ms",
                f"{med['direct'] * 1000:,.0f} ms",
                f"{parse * 1000:,.0f} ms",
                f"{med['proxied'] * 1000:,.0f} ms",
                f"{vs_direct.describe()}",
                f"{vs_shell.describe('.1f')}",
                f"{per_mb_ms(med['direct'], f.file_bytes):.1f}",
                f"{per_mb_ms(med['proxied'], f.file_bytes):.1f}",
            )
        )
    print_markdown(headers, rows)
    print()
    print("per-round seconds proxied/direct/cat+openssl:")
    for f in facts:
        assert f.rounds is not None
        columns = [f.rounds.seconds(n) for n in ("proxied", "direct", "shell")]
        specs = [".3f"] * len(columns)
        print(f"  {f.size_mb:g} MB: {round_by_round(*columns, specs=specs)}")
    print()
    calls = rounds + 1
    rss_headers = (
        "file",
        "message",
        "proxy RSS at start",
        "peak after 1st call",
        f"peak after {calls} calls (VmHWM)",
        "target: 2.5x message + 100 MB",
        "peak/message",
        "RSS after last call",
        "upstream node peak (proxied)",
        "node peak (direct)",
    )
    rss_rows = []
    rss_ok = True
    worst = ""
    for f in facts:
        message_mb = f.message_bytes / MB
        peak_mb = mb_of(f.proxy_hwm_kib)
        target = RSS_FACTOR * message_mb + RSS_SLACK_MB
        ok = peak_mb <= target
        rss_ok = rss_ok and ok
        if f is facts[-1]:
            worst = (
                f"{peak_mb:.0f} MB over {calls} calls, "
                f"{mb_of(f.proxy_hwm_first_kib):.0f} MB after the first, at a "
                f"{message_mb:.0f} MB message; "
                f"target {target:.0f} MB"
            )
        rss_rows.append(
            (
                f"{f.file_bytes / MB:.1f} MB",
                f"{message_mb:.1f} MB",
                f"{mb_of(f.proxy_rss_start_kib):.0f} MB",
                f"{mb_of(f.proxy_hwm_first_kib):.0f} MB",
                f"{peak_mb:.0f} MB",
                f"{target:.0f} MB {verdict(ok=ok)}",
                f"{peak_mb / message_mb:.2f}x",
                f"{mb_of(f.proxy_rss_end_kib):.0f} MB",
                f"{mb_of(f.upstream_hwm_kib):.0f} MB",
                f"{mb_of(f.direct_hwm_kib):.0f} MB",
            )
        )
    print_markdown(rss_headers, rss_rows)
    print()
    last = facts[-1]
    print(
        f"the proxy's client got {last.proxied_reply_bytes:,} bytes "
        f"({last.preview_chars:,} chars of text) for the {last.size_mb:g} MB file"
    )
    for name, label in (("direct", "direct (upstream)"), ("proxied", "proxied")):
        ok, note = linear_check(facts, name)
        print(
            f"VERDICT (2) {label} time about linear (<= {LINEAR_RATIO}x ms/MB): "
            f"{verdict(ok=ok)} ({note})"
        )
    print(
        f"VERDICT (2) proxy peak RSS <= {RSS_FACTOR}x message + {RSS_SLACK_MB:.0f} MB "
        f"at every size: {verdict(ok=rss_ok)} (largest: {worst})"
    )


# ------------------------------------------------------- 3. the SDK's client


async def sdk_read(
    command: list[str], env: dict[str, str], path: str, errlog: IO[str]
) -> tuple[float, int]:
    """One `read_text_file` with the SDK's stdio client: seconds, text chars."""
    from mcp import ClientSession, StdioServerParameters  # noqa: PLC0415 - optional
    from mcp.client.stdio import stdio_client  # noqa: PLC0415

    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        with anyio.fail_after(SDK_HARD_LIMIT_SECONDS):
            started = time.perf_counter()
            result = await session.call_tool(READ_TOOL, {"path": path})
            seconds = time.perf_counter() - started
    chars = sum(len(getattr(block, "text", "")) for block in result.content)
    return seconds, chars


@dataclass(frozen=True)
class SdkRow:
    """One SDK call each way on one size."""

    size: SizeFacts
    direct: float
    direct_chars: int
    proxied: float
    proxied_chars: int


def sdk_runs(setup: Setup, facts: list[SizeFacts], max_mb: float) -> list[str | SdkRow]:
    """SDK reads of each size up to `max_mb`, stopping before one would be too slow."""
    env = {"SPILLVAULT_HOME": setup.env["SPILLVAULT_HOME"]}
    log = os.path.join(setup.logs, "sdk.log")
    out: list[str | SdkRow] = []
    previous: tuple[float, float] | None = None  # (size MB, direct seconds)
    for f in facts:
        if f.size_mb > max_mb:
            out.append(f"{f.size_mb:g} MB: skipped (over --sdk-max-mb {max_mb:g})")
            continue
        if previous is not None:
            guess = previous[1] * (f.size_mb / previous[0]) ** 2
            if guess > SDK_BUDGET_SECONDS:
                out.append(f"{f.size_mb:g} MB: skipped (quadratic guess {guess:.0f} s)")
                continue
        path = os.path.join(setup.files, f"log-{f.size_mb:g}MB.log")
        with open(log, "a", encoding="utf-8") as errlog:
            direct = anyio.run(sdk_read, setup.direct, env, path, errlog)
            proxied = anyio.run(sdk_read, setup.proxied, env, path, errlog)
        out.append(SdkRow(f, direct[0], direct[1], proxied[0], proxied[1]))
        previous = (f.size_mb, direct[0])
    return out


def sdk_report(rows: list[str | SdkRow]) -> None:
    """Print (3)'s table."""
    print("## 3. For information: the SDK's stdio client (one call each)")
    print()
    headers = (
        "file",
        "raw client direct (2)",
        "SDK direct",
        "SDK/raw",
        "SDK ms/MB",
        "SDK through proxy",
        "SDK direct / SDK through proxy",
    )
    table = []
    notes = []
    for row in rows:
        if isinstance(row, str):
            notes.append(row)
            continue
        f = row.size
        assert f.rounds is not None
        raw = f.rounds.stats("direct").median
        assert row.direct_chars == f.file_bytes, (row.direct_chars, f.file_bytes)
        assert row.proxied_chars <= PREVIEW_BOUND
        table.append(
            (
                f"{f.file_bytes / MB:.1f} MB",
                f"{raw * 1000:,.0f} ms",
                f"{row.direct * 1000:,.0f} ms",
                f"{row.direct / raw:.1f}x",
                f"{per_mb_ms(row.direct, f.file_bytes):,.0f}",
                f"{row.proxied * 1000:,.0f} ms ({row.proxied_chars:,} chars)",
                f"{row.direct / row.proxied:.1f}x",
            )
        )
    print_markdown(headers, table)
    for note in notes:
        print(note)


# ------------------------------------------------------------------ main


def parse_sizes(text: str) -> list[float]:
    """`1,5,20,50` -> [1.0, 5.0, 20.0, 50.0], sorted."""
    return sorted(float(part) for part in text.split(",") if part.strip())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calls", type=int, default=DEFAULT_CALLS, help="small calls each way in (1)"
    )
    parser.add_argument(
        "--batch", type=int, default=DEFAULT_BATCH, help="calls per alternation in (1)"
    )
    parser.add_argument(
        "--sizes", type=parse_sizes, default=DEFAULT_SIZES, help="MB sizes in (2)"
    )
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds per size in (2)"
    )
    parser.add_argument(
        "--sdk-max-mb",
        type=float,
        default=DEFAULT_SDK_MAX_MB,
        help="largest size read with the SDK client in (3); 0 skips (3)",
    )
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    return parser.parse_args(argv)


def node_version() -> str:
    """`node --version`."""
    done = subprocess.run(["node", "--version"], capture_output=True, check=True)
    return done.stdout.decode().strip()


def server_version() -> str:
    """server-filesystem's package version."""
    package = os.path.join(
        os.path.dirname(os.path.dirname(FILESYSTEM_SERVER)), "package.json"
    )
    with open(package, encoding="utf-8") as source:
        return str(json.load(source).get("version", "unknown"))


def main(argv: list[str] | None = None) -> int:
    """Check the tools are there, then measure in a temp dir."""
    args = parse_args(argv)
    missing = [
        tool for tool in ("node", "bash", "cat", "openssl") if not shutil.which(tool)
    ]
    if missing or not os.path.exists(FILESYSTEM_SERVER):
        print(
            f"missing: {', '.join(missing) or FILESYSTEM_SERVER} "
            "(the servers: npm ci in tests/npm)",
            file=sys.stderr,
        )
        return 2
    return run_in_temp_dir(bench, args)


def bench(root: str, args: argparse.Namespace) -> int:
    """Run (1), (2) and (3) under `root` and print the tables."""
    started = time.perf_counter()
    print_host(
        root,
        f"node {node_version()}",
        f"server-filesystem {server_version()}",
        f"spillvault {version_of('spillvault')}",
        f"mcp {version_of('mcp')}",
        fsync=True,
    )
    setup = Setup(
        root=root,
        files=os.path.join(root, "files"),
        env={
            **{k: v for k, v in os.environ.items() if k != "SPILLVAULT_SESSION"},
            "SPILLVAULT_HOME": os.path.join(root, "home"),
        },
        logs=os.path.join(root, "logs"),
    )
    for path in (setup.files, setup.logs, setup.env["SPILLVAULT_HOME"]):
        os.makedirs(path)
    fsync_path(root)
    print()
    small = latency(setup, args.calls, args.batch)
    latency_report(small, args.calls, args.batch)
    print()
    facts = [huge_result(setup, size, args.rounds) for size in args.sizes]
    huge_report(facts, args.rounds)
    if args.sdk_max_mb > 0:
        print()
        sdk_report(sdk_runs(setup, facts, args.sdk_max_mb))
    print()
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
