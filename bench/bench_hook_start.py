#!/usr/bin/env python3
"""What a hook costs each tool call: `spillvault hook run` against a bare interpreter.

A coding agent runs its hooks on every tool call, so the hook's own start-up
is added to each one. This runs, `--runs` times each, interleaved:

- `python -c pass` with the same interpreter (the floor any Python hook pays);
- `true` (the floor any hook at all pays: a fork and an exec);
- `spillvault hook run claude-code PreToolUse` on a Bash event it wraps;
- `spillvault hook run claude-code PostToolUse` on a short output it leaves alone;

and prints the median and p95 wall time of each, and the time the hook adds to
the interpreter. The goal is under 100 ms for a hook run.

    .venv/bin/python bench/bench_hook_start.py [--runs 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import print_footer, print_host, print_table, run_in_temp_dir, verdict

if TYPE_CHECKING:
    from collections.abc import Sequence

GOAL_MS = 100.0
SPILLVAULT = str(Path(sys.executable).parent / "spillvault")


def _event(name: str, **fields: object) -> str:
    base = {"session_id": "bench", "cwd": "/tmp", "permission_mode": "default"}
    return json.dumps({**base, "hook_event_name": name, **fields})


def _contenders() -> dict[str, tuple[list[str], str]]:
    pre = _event("PreToolUse", tool_name="Bash", tool_input={"command": "make test"})
    post = _event(
        "PostToolUse",
        tool_name="Bash",
        tool_response={"stdout": "ok\n", "stderr": "", "interrupted": False},
    )
    return {
        "true": (["true"], ""),
        "python -c pass": ([sys.executable, "-c", "pass"], ""),
        "hook PreToolUse (wraps)": (
            [SPILLVAULT, "hook", "run", "claude-code", "PreToolUse"],
            pre,
        ),
        "hook PostToolUse (short)": (
            [SPILLVAULT, "hook", "run", "claude-code", "PostToolUse"],
            post,
        ),
    }


def _time(argv: Sequence[str], stdin: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, env=env, check=True
    )
    return (time.perf_counter() - started) * 1000


def bench(root: str, args: argparse.Namespace) -> int:
    """Run every contender `--runs` times, interleaved, and print the table."""
    started = time.perf_counter()
    print_host(root, fsync=False)
    env = {**os.environ, "HOME": root, "SPILLVAULT_HOME": os.path.join(root, "state")}
    contenders = _contenders()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for argv, stdin in contenders.values():
        _time(argv, stdin, env)  # warm the page cache
    for _ in range(args.runs):
        for name, (argv, stdin) in contenders.items():
            samples[name].append(_time(argv, stdin, env))
    floor = statistics.median(samples["python -c pass"])
    rows = []
    for name, values in samples.items():
        median = statistics.median(values)
        p95 = sorted(values)[int(0.95 * (len(values) - 1))]
        rows.append(
            [name, f"{median:.1f} ms", f"{p95:.1f} ms", f"{median - floor:+.1f} ms"]
        )
    print(f"\n## Hook start-up, {args.runs} runs each, interleaved\n")
    print_table(["command", "median", "p95", "vs python -c pass"], rows)
    worst = max(
        statistics.median(samples["hook PreToolUse (wraps)"]),
        statistics.median(samples["hook PostToolUse (short)"]),
    )
    print(f"\nVERDICT hook run median under {GOAL_MS:.0f} ms: "
          f"{verdict(ok=worst < GOAL_MS)} ({worst:.1f} ms)")  # fmt: skip
    print_footer(started)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the options and run in a temp dir."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="runs of each (40)")
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    return run_in_temp_dir(bench, parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
