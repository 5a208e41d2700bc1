#!/usr/bin/env python3
"""Terminal noise: what cleaning escape sequences and redrawn lines saves (S1.4).

Real colored output, captured offline in subprocesses as the bytes a pipe gets
(color forced on, so the escapes are the ones a harness would capture):

- `pytest --color=yes -v` on some of this repo's unit tests (`--tests`);
- `ls --color=always -la /usr/lib`;
- `grep --color=always -rn def adapters` in this repository;
- `git log --color=always --stat -n 200` and `git log --color=always -p -n 20`;
- `git clone --progress --no-local` of this repository (its stderr: progress
  lines redrawn in place with carriage returns).

For each output: its size in UTF-8 bytes and in tokens (the default policy's
counter) raw and as a preview shows it (`clean_terminal`), the ratios shown /
raw, and how many of its lines fit the 30,000-char bash preview budget before
and after (by the mean line length). A total row sums them. Every output also
goes through the gate as bytes (`process(data, "bash")`): a spilled preview is
checked free of ESC and CR and its artifact byte-identical to the capture.
Then, for information, the cost: `clean_terminal` over the largest capture
against `str.encode` of the same text (one pass, a baseline of the same run),
best of `--repeat` interleaved timeit rounds.

Run from the repository root:

    .venv/bin/python bench/bench_terminal_noise.py
    .venv/bin/python bench/bench_terminal_noise.py --tests tests/unit/test_policy.py

Everything goes in a temp dir under `--dir` (default: the system temp dir),
which is removed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, fields

from spillvault.adapters.session import ToolResultExternalizer
from spillvault.domain.policy import SpillPolicy
from spillvault.domain.terminal import clean_terminal

from harness import MB, micro, print_footer, print_host, print_table, run_in_temp_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TESTS = (  # quick ones, enough for a log over the 30,000-char bash limit
    "tests/unit/test_values.py",
    "tests/unit/test_terminal.py",
    "tests/unit/test_binary.py",
    "tests/unit/test_policy.py",
    "tests/unit/test_key_lines.py",
    "tests/unit/test_machines.py",
    "tests/unit/test_specs.py",
    "tests/unit/test_reconciliation_table.py",
)
DEFAULT_REPEAT = 7
TIMEIT_SECONDS = 0.05
BASH_BUDGET = 30_000  # chars
HEADERS = (
    "output",
    "bytes raw",
    "bytes shown",
    "shown/raw",
    "tokens raw",
    "tokens shown",
    "shown/raw",
    "lines in 30k chars",
    "gate",
)


@dataclass(frozen=True)
class Capture:
    """One command's captured output."""

    name: str
    data: bytes


@dataclass(frozen=True)
class Sizes:
    """An output's size raw and as shown, in bytes, tokens, chars and lines."""

    raw_bytes: int
    shown_bytes: int
    raw_tokens: int
    shown_tokens: int
    raw_chars: int
    shown_chars: int
    lines: int


def capture(name: str, argv: list[str], *, stderr: bool = False) -> Capture | None:
    """Run `argv` in the repository; keep its stdout (or stderr), None if empty."""
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        print(f"skipped {name}: {argv[0]} not found")
        return None
    done = subprocess.run(argv, cwd=REPO, capture_output=True, check=False)
    data = done.stderr if stderr else done.stdout
    if not data:
        print(f"skipped {name}: no output (exit {done.returncode})")
        return None
    return Capture(name, data)


def captures(root: str, tests: list[str]) -> list[Capture]:
    """Capture every output the module docstring lists."""
    pytest = os.path.join(os.path.dirname(sys.executable), "pytest")
    found = [
        capture(
            "pytest --color=yes -v",
            [pytest, "--color=yes", "-v", "-p", "no:cacheprovider", *tests],
        ),
        capture(
            "ls --color=always -la /usr/lib",
            ["ls", "--color=always", "-la", "/usr/lib"],
        ),
        capture(
            "grep --color=always -rn def adapters",
            ["grep", "--color=always", "-rn", "def", "adapters"],
        ),
        capture(
            "git log --color=always --stat -n 200",
            ["git", "log", "--color=always", "--stat", "-n", "200"],
        ),
        capture(
            "git log --color=always -p -n 20",
            ["git", "log", "--color=always", "-p", "-n", "20"],
        ),
        capture(
            "git clone --progress (stderr)",
            [
                "git",
                "clone",
                "--progress",
                "--no-local",
                REPO,
                os.path.join(root, "clone"),
            ],
            stderr=True,
        ),
    ]
    return [c for c in found if c is not None]


def sizes_of(data: bytes, policy: SpillPolicy) -> Sizes:
    """Measure an output raw and cleaned, decoded as the gate decodes it."""
    raw = data.decode("utf-8", "replace")
    shown = clean_terminal(raw)
    count = policy.token_counter
    return Sizes(
        raw_bytes=len(raw.encode("utf-8", "surrogatepass")),
        shown_bytes=len(shown.encode("utf-8", "surrogatepass")),
        raw_tokens=count(raw),
        shown_tokens=count(shown),
        raw_chars=len(raw),
        shown_chars=len(shown),
        lines=max(raw.count("\n"), 1),
    )


def gate_check(ext: ToolResultExternalizer, data: bytes) -> str:
    """Gate the bytes; check a spilled preview is clean and its artifact exact."""
    outcome = ext.process(data, "bash")
    if outcome.reason != "spilled":
        return outcome.reason
    reference = outcome.artifact
    assert reference is not None
    assert isinstance(outcome.content, str)
    assert "\x1b" not in outcome.content
    assert "\r" not in outcome.content
    assert ext.read_artifact_bytes(reference.handle, 0, reference.size_bytes) == data
    return "spilled, clean, exact"


def lines_in_budget(chars: int, lines: int) -> int:
    """How many lines of this mean length fit the bash preview budget."""
    return min(lines, BASH_BUDGET * lines // max(chars, 1))


def row(name: str, s: Sizes, gate: str) -> list[str]:
    """One table row."""
    before = lines_in_budget(s.raw_chars, s.lines)
    after = lines_in_budget(s.shown_chars, s.lines)
    return [
        name,
        f"{s.raw_bytes:,}",
        f"{s.shown_bytes:,}",
        f"{s.shown_bytes / s.raw_bytes:.3f}",
        f"{s.raw_tokens:,}",
        f"{s.shown_tokens:,}",
        f"{s.shown_tokens / s.raw_tokens:.3f}",
        f"{before:,} -> {after:,}",
        gate,
    ]


def total(all_sizes: list[Sizes]) -> Sizes:
    """Sum the sizes of every output."""
    return Sizes(*(sum(getattr(s, f.name) for s in all_sizes) for f in fields(Sizes)))


def clean_cost(text: str, repeat: int) -> str:
    """Time `clean_terminal` against `str.encode` on `text`; describe both."""
    cases = {
        "clean_terminal": ("clean(text)", {"clean": clean_terminal, "text": text}),
        "str.encode": ("text.encode()", {"text": text}),
    }
    stats = micro(cases, repeat, budget=TIMEIT_SECONDS)
    size = len(text.encode())
    clean_s = stats["clean_terminal"].low / 1e9
    encode_s = stats["str.encode"].low / 1e9
    return (
        f"cost, on the largest capture ({size / MB:.2f} MB): clean_terminal "
        f"{size / clean_s / MB:,.0f} MB/s, str.encode {size / encode_s / MB:,.0f} MB/s "
        f"(clean/encode time {clean_s / encode_s:.1f}x); best of {repeat} rounds"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tests",
        nargs="+",
        default=list(DEFAULT_TESTS),
        help="test files pytest runs for its colored log",
    )
    parser.add_argument(
        "--repeat", type=int, default=DEFAULT_REPEAT, help="timeit rounds (7)"
    )
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Capture, measure, gate, print the table, clean up."""
    args = parse_args(argv)
    return run_in_temp_dir(bench, args)


def bench(root: str, args: argparse.Namespace) -> int:
    """Measure everything under `root` and print the table."""
    started = time.perf_counter()
    print_host(root, fsync=False)
    found = captures(root, args.tests)
    if not found:
        print("nothing captured", file=sys.stderr)
        return 2
    policy = SpillPolicy()
    ext = ToolResultExternalizer(os.path.join(root, "session"))
    try:
        measured = [(c, sizes_of(c.data, policy)) for c in found]
        rows = [row(c.name, s, gate_check(ext, c.data)) for c, s in measured]
    finally:
        ext.close()
    rows.append(row("total", total([s for _, s in measured]), ""))
    print()
    print_table(HEADERS, rows, align="lrrrrrrrl")
    print()
    print(
        "shown = as a preview shows it (clean_terminal); tokens: the default "
        "policy's counter; lines: of the mean length, in the bash budget"
    )
    largest = max(found, key=lambda c: len(c.data))
    print(clean_cost(largest.data.decode("utf-8", "replace"), args.repeat))
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
