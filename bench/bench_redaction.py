#!/usr/bin/env python3
"""Secret redaction: false positives and cost, against baselines in one run (issue 20).

1. False positives on real text that holds no live secrets: `git log -p` of
   this repository, the source and docs of the venv's site-packages,
   `pip list -v`, `env` (variables whose name looks secret dropped), and
   bench/survival/corpus when present. Each text is redacted whole and every
   mask is listed. PEM private-key blocks found there are real key material
   (library test vectors), counted apart; every other mask is a false
   positive. Target: <= 1 false positive per MB.
2. Redaction throughput alone (MB/s) on each text, next to `str.encode` of it.
3. Time added to a spill: `process(50 MB str, "bash")` with `redact_secrets`
   on and off, two sessions, interleaved rounds (bench/harness.py
   `interleave`); each timed artifact's file is removed after its round, as
   bench_spill.py does. Two texts: a plain log, and the same log with a
   secret on its first line (the preview's head then differs from the text,
   so the redacted copy is built). Target: <= 1.10x.

Run from the repository root:

    .venv/bin/python bench/bench_redaction.py
    .venv/bin/python bench/bench_redaction.py --rounds 7 --mb 50 --text-mb 20
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from spillvault.adapters.session import open_session
from spillvault.domain.policy import SpillPolicy
from spillvault.domain.redaction import Edge, Redactor

from harness import MB, interleave

if TYPE_CHECKING:
    from collections.abc import Callable

_SECRETISH = re.compile(r"(?i)key|token|secret|pass|auth|cred|cookie|session")
_LINE = "2026-12-02T09:00:00Z INFO worker 7 processed batch 1234 in 56 ms ok\n"
_PLANTED = "export GITHUB_TOKEN=ghp_4Rk9Xz2Lq7Vt3Nb8Mw1Pz6Yc0Hf5Gj2KsD8aE\n"


def _command(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, check=False)
    return done.stdout.decode("utf-8", "replace")


def _site_packages(cap: int) -> str:
    site = next(Path(".venv/lib").glob("python3*/site-packages"))
    parts: list[str] = []
    size = 0
    for path in sorted(site.rglob("*")):
        if path.suffix not in {".py", ".md", ".rst", ".txt", ".toml", ".cfg"}:
            continue
        if not path.is_file():
            continue
        text = path.read_text("utf-8", "replace")
        parts.append(text)
        size += len(text)
        if size >= cap:
            break
    return "\n".join(parts)


def real_texts(limit_mb: float) -> dict[str, str]:
    """Return the real texts of (1), each cut to `limit_mb`."""
    cap = int(limit_mb * MB)
    texts = {
        "git log -p": _command("git", "-C", os.getcwd(), "log", "-p", "--no-color")[
            :cap
        ],
        "site-packages source and docs": _site_packages(cap),
        "pip list -v": _command(sys.executable, "-m", "pip", "list", "-v"),
        "env (secret-looking names dropped)": "\n".join(
            f"{k}={v}" for k, v in os.environ.items() if not _SECRETISH.search(k)
        ),
    }
    corpus = Path("bench/survival/corpus")
    if corpus.is_dir():
        files = sorted(p for p in corpus.rglob("*") if p.is_file())
        joined = "\n".join(p.read_text("utf-8", "replace") for p in files)
        texts["bench/survival/corpus"] = joined[:cap]
    return texts


def false_positives(texts: dict[str, str]) -> None:
    """Print (1) and (2)."""
    redactor = Redactor(b"b" * 32)
    total = 0
    seen: list[tuple[str, str, str]] = []
    print("## False positives on real text, and redaction throughput\n")
    print("| text | MB | masks | of which PEM keys | redact MB/s | encode MB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, text in texts.items():
        size = len(text.encode("utf-8", "surrogatepass"))
        started = time.perf_counter()
        spans = redactor.spans(text, start=Edge.WHOLE, end=Edge.WHOLE)
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        text.encode("utf-8", "surrogatepass")
        encode = max(time.perf_counter() - started, 1e-9)
        total += size
        found = [(name, s.kind, text[s.start : s.end][:60]) for s in spans]
        seen += found
        keys = sum(1 for _n, kind, _t in found if kind == "private-key")
        print(
            f"| {name} | {size / MB:.1f} | {len(spans)} | {keys} "
            f"| {size / MB / max(seconds, 1e-9):.0f} | {size / MB / encode:.0f} |"
        )
    keys = sum(1 for _n, kind, _t in seen if kind == "private-key")
    false = len(seen) - keys
    rate = false / (total / MB)
    verdict = "met" if rate <= 1 else "NOT met"
    print(
        f"\n{len(seen)} masks in {total / MB:.1f} MB: {keys} PEM private-key blocks "
        f"(real key material), {false} false positives = {rate:.2f} per MB "
        f"(target <= 1: {verdict})\n"
    )
    for name, kind, excerpt in seen:
        if kind != "private-key":
            print(f"- {name}: {kind}: {excerpt!r}")
    print()


def _contender(ext: object, text: str) -> Callable[[object], None]:
    def call(_lap: object) -> None:
        outcome = ext.process(text, "bash")  # type: ignore[attr-defined]
        assert outcome.reason == "spilled"
        if outcome.artifact is not None:
            os.unlink(outcome.artifact.path)  # no round writes into fresher pages

    return call


def spill_cost(rounds: int, size_mb: int, temp: str) -> None:
    """Print (3)."""
    plain = _LINE * (size_mb * MB // len(_LINE))
    texts = {"plain log": plain, "secret on line 1": _PLANTED + plain}
    on = open_session(f"{temp}/on", policy=SpillPolicy())
    off = open_session(f"{temp}/off", policy=SpillPolicy(redact_secrets=False))
    print(f"## Time added to a spill: process({size_mb} MB str, 'bash')\n")
    print("| text | redact on (ms) | redact off (ms) | on/off | target <= 1.10x |")
    print("|---|---:|---:|---:|---|")
    try:
        for name, text in texts.items():
            contenders = {
                "on": _contender(on.externalizer, text),
                "off": _contender(off.externalizer, text),
            }
            result = interleave(contenders, rounds, warmup=True)
            share = result.ratio("on", "off")
            verdict = "met" if share.of_medians <= 1.10 else "NOT met"
            print(
                f"| {name} | {result.stats('on').median * 1000:.0f} "
                f"| {result.stats('off').median * 1000:.0f} | {share.describe()} "
                f"| {verdict} |"
            )
    finally:
        on.close()
        off.close()
    print(f"\nmedians of {rounds} interleaved rounds, per-round ratios in brackets\n")


def main() -> int:
    """Run the three measurements."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--mb", type=int, default=50, help="spill size (50)")
    parser.add_argument("--text-mb", type=float, default=20, help="cap a text (20)")
    args = parser.parse_args()
    false_positives(real_texts(args.text_mb))
    with tempfile.TemporaryDirectory() as temp:
        spill_cost(args.rounds, args.mb, temp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
