#!/usr/bin/env python3
"""What a hook and a wrapped command cost each tool call, against bare runs.

A coding agent runs its hooks on every tool call, and a hook that wraps the
agent's shell commands puts `spillvault run` in front of each one, so the
start-up of both is added to every call. This runs, `--runs` rounds,
interleaved (the order reversed every other round):

- `true` (the floor anything pays: a fork and an exec);
- `python -c pass` with the same interpreter (the floor any Python hook pays);
- `seq 1 200`, a command with a small output (692 bytes);
- `spillvault run -- true` and `spillvault run -- seq 1 200`;
- `spillvault hook run claude-code PreToolUse` on a Bash event it wraps;
- `spillvault hook run claude-code PostToolUse` on a short output it leaves alone;

and prints the median and p95 wall time of each and the time each adds to its
bare counterpart (the hooks: to `python -c pass`), as the median of the rounds'
differences, with the ratio; and the same for CPU time (user + system), which
other load on the machine sways less. The goals: a wrapped command adds at most 50 ms,
a hook run takes under 100 ms. It also counts the sessions the wrapped commands
left under $SPILLVAULT_HOME: none, as their outputs are short.

    .venv/bin/python bench/bench_hook_start.py [--runs 40]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import (
    Lap,
    interleave,
    print_footer,
    print_host,
    print_table,
    ratio,
    run_in_temp_dir,
    verdict,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

HOOK_GOAL_MS = 100.0
RUN_GOAL_MS = 50.0
SPILLVAULT = str(Path(sys.executable).parent / "spillvault")
PYTHON = "python -c pass"
SMALL = ["seq", "1", "200"]
WRAPPED = {"spillvault run -- true": "true", "spillvault run -- seq 1 200": "seq 1 200"}
"""Each wrapped command and its bare counterpart."""
HOOKS = ("hook PreToolUse (wraps)", "hook PostToolUse (short)")
CPU = "cpu"
"""The section of a call's CPU time (user + system): less swayed by other load."""


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
        PYTHON: ([sys.executable, "-c", "pass"], ""),
        "seq 1 200": (SMALL, ""),
        "spillvault run -- true": ([SPILLVAULT, "run", "--", "true"], ""),
        "spillvault run -- seq 1 200": ([SPILLVAULT, "run", "--", *SMALL], ""),
        HOOKS[0]: ([SPILLVAULT, "hook", "run", "claude-code", "PreToolUse"], pre),
        HOOKS[1]: ([SPILLVAULT, "hook", "run", "claude-code", "PostToolUse"], post),
    }


def _cpu_seconds() -> float:
    """User plus system time of the children waited for so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _call(
    argv: Sequence[str], stdin: str, env: dict[str, str]
) -> Callable[[Lap], None]:
    def call(lap: Lap) -> None:
        cpu = _cpu_seconds()
        with lap.time():
            subprocess.run(
                list(argv),
                input=stdin,
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
        lap.add(_cpu_seconds() - cpu, CPU)

    return call


def _added(subject: Sequence[float], bare: Sequence[float]) -> float:
    """Milliseconds `subject` adds to `bare`: the median of the rounds' differences."""
    return statistics.median(s - b for s, b in zip(subject, bare, strict=True)) * 1000


def bench(root: str, args: argparse.Namespace) -> int:
    """Run every contender `--runs` rounds, interleaved, and print the tables."""
    started = time.perf_counter()
    print_host(root, fsync=False)
    state = os.path.join(root, "state")
    env = {**os.environ, "HOME": root, "SPILLVAULT_HOME": state}
    env.pop("SPILLVAULT_SESSION", None)
    contenders = {
        name: _call(argv, stdin, env) for name, (argv, stdin) in _contenders().items()
    }
    rounds = interleave(contenders, args.runs, warmup=True)
    rows = []
    for name in contenders:
        values = sorted(rounds.seconds(name))
        rows.append(
            [
                name,
                f"{statistics.median(values) * 1000:.1f} ms",
                f"{values[int(0.95 * (len(values) - 1))] * 1000:.1f} ms",
                f"{statistics.median(rounds.seconds(name, CPU)) * 1000:.1f} ms",
            ]
        )
    print(f"\n## Start-up, {args.runs} rounds each, interleaved\n")
    print_table(["command", "median", "p95", "CPU median"], rows, "lrrr")
    pairs = list(WRAPPED.items())
    pairs += [(name, PYTHON) for name in HOOKS]
    added_rows = []
    added: dict[str, float] = {}
    for name, bare in pairs:
        subject, baseline = rounds.seconds(name), rounds.seconds(bare)
        added[name] = _added(subject, baseline)
        cpu = _added(rounds.seconds(name, CPU), rounds.seconds(bare, CPU))
        added_rows.append(
            [
                name,
                bare,
                f"{added[name]:+.1f} ms",
                ratio(subject, baseline).describe(".1f"),
                f"{cpu:+.1f} ms",
            ]
        )
    print(f"\n## Added over bare (median of the {args.runs} rounds' differences)\n")
    headers = ["command", "bare", "added over bare", "ratio", "CPU added"]
    print_table(headers, added_rows, "llrlr")
    sessions = len(os.listdir(state)) if os.path.isdir(state) else 0
    print(f"\nsessions the wrapped commands left under $SPILLVAULT_HOME: {sessions}")
    worst_run = max(added[name] for name in WRAPPED)
    print(f"VERDICT spillvault run adds at most {RUN_GOAL_MS:.0f} ms over bare: "
          f"{verdict(ok=worst_run <= RUN_GOAL_MS)} ({worst_run:+.1f} ms)")  # fmt: skip
    worst_hook = max(statistics.median(rounds.seconds(name)) * 1000 for name in HOOKS)
    print(f"VERDICT hook run median under {HOOK_GOAL_MS:.0f} ms: "
          f"{verdict(ok=worst_hook < HOOK_GOAL_MS)} ({worst_hook:.1f} ms)")  # fmt: skip
    print_footer(started)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the options and run in a temp dir."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="rounds (40)")
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    return run_in_temp_dir(bench, parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
