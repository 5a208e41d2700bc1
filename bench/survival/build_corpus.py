#!/usr/bin/env python3
"""Rebuild the preview-survival corpus: real outputs of real programs, run here.

Each output is one command's stdout and stderr as one pipe gets them (stderr
merged into stdout, colour off), captured in a fresh temp workspace. The
sources the programs work on are generated (a fixed seed) or copied from the
Python standard library, and failures are planted where a real run has none,
so that the lines an agent must see sit at the start, in the middle and at the
end of outputs. The builders live by kind in runners.py, compilers.py,
checkers.py, tools.py and listings.py.

Needles are marked by rule, never by hand (the rule: needles.py), and the same
needles score every policy. corpus/manifest.json records per output: program,
argv as run (workspace paths made relative), exit code, size, file, needles
{text, kind, line, offset}; and the version of every program. Each output is
stored xz-compressed.

It needs gcc, g++, make, rustc, cargo (with clippy), javac, node, npm, git and
tar, the npm packages of bench/survival (`make bench-survival` installs them)
and the npm registry (one install is meant to fail there). From the repository
root:

    .venv/bin/python bench/survival/build_corpus.py
    .venv/bin/python bench/survival/build_corpus.py --only mypy-strict
"""

from __future__ import annotations

import argparse
import functools
import json
import lzma
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import checkers
import compilers
import listings
import runners
import tools
from capture import HERE, NODE_BIN, venv
from needles import mark_needles

if TYPE_CHECKING:
    from collections.abc import Callable

    from capture import Run

CORPUS = HERE / "corpus"
MANIFEST = CORPUS / "manifest.json"
MIN_CHARS = 30_001  # every output must exceed the bash limit, or no preview is made


@dataclass(frozen=True)
class Spec:
    """One corpus output: a name, its program, and the builder that runs it."""

    name: str
    program: str
    build: Callable[[Path], Run]


SPECS = (
    Spec("pytest-verbose-tb-no", "pytest", runners.build_pytest_tbno),
    Spec("pytest-long-locals", "pytest", runners.build_pytest_locals),
    Spec("unittest-verbose", "unittest", runners.build_unittest),
    Spec("unittest-noisy-prints", "unittest", runners.build_unittest_noisy),
    Spec("node-test-tap", "node --test", runners.build_node_tap),
    Spec("node-test-spec", "node --test", runners.build_node_spec),
    Spec("cargo-test", "cargo test", runners.build_cargo_test),
    Spec("gcc-warnings-errors", "gcc", compilers.build_gcc),
    Spec("gxx-template-errors", "g++", compilers.build_gxx),
    Spec("make-k-gcc", "make", compilers.build_make),
    Spec("rustc-borrow-errors", "rustc", compilers.build_rustc),
    Spec("cargo-clippy-pedantic", "cargo clippy", compilers.build_clippy),
    Spec("javac-xlint", "javac", compilers.build_javac),
    Spec("tsc-strict", "tsc", compilers.build_tsc),
    Spec("eslint-recommended", "eslint", checkers.build_eslint),
    Spec("ruff-check-all", "ruff", checkers.build_ruff),
    Spec("ruff-format-diff", "ruff", checkers.build_ruff_format),
    Spec("mypy-strict", "mypy", checkers.build_mypy),
    Spec("pip-install-build-failure", "pip", tools.build_pip),
    Spec("pip-install-missing-package", "pip", tools.build_pip_resolve),
    Spec("npm-install-missing-version", "npm", tools.build_npm),
    Spec("npm-test-failing", "npm", tools.build_npm_test),
    Spec("python-logging-errors", "python logging", tools.build_log),
    Spec("python-logging-warnings", "python logging", tools.build_log_warnings),
    Spec("cprofile-tottime", "cProfile", listings.build_cprofile),
    Spec("git-log-patch", "git log", listings.build_git_log),
    Spec("git-log-stat", "git log", listings.build_git_log_stat),
    Spec("pip-show-files", "pip", listings.build_pip_show),
    Spec("dpkg-list", "dpkg", listings.build_dpkg),
    Spec("grep-rn-def", "grep", listings.build_grep),
    Spec("find-py-files", "find", listings.build_find),
    Spec("ls-lR", "ls", listings.build_ls),
    Spec("tar-tvf", "tar", listings.build_tar),
)

VERSION_COMMANDS = {
    "python": [sys.executable, "--version"],
    "pytest": [venv("pytest"), "--version"],
    "node": ["node", "--version"],
    "npm": ["npm", "--version"],
    "gcc": ["gcc", "--version"],
    "g++": ["g++", "--version"],
    "make": ["make", "--version"],
    "rustc": ["rustc", "--version"],
    "cargo": ["cargo", "--version"],
    "clippy": ["cargo", "clippy", "--version"],
    "javac": ["javac", "-version"],
    "tsc": [str(NODE_BIN / "tsc"), "--version"],
    "eslint": [str(NODE_BIN / "eslint"), "--version"],
    "ruff": [venv("ruff"), "--version"],
    "mypy": [venv("mypy"), "--version"],
    "pip": [venv("pip"), "--version"],
    "git": ["git", "--version"],
    "grep": ["grep", "--version"],
    "find": ["find", "--version"],
    "ls": ["ls", "--version"],
    "tar": ["tar", "--version"],
    "dpkg": ["dpkg", "--version"],
}


@functools.cache
def versions() -> dict[str, str]:
    """The first line each program prints for its version."""
    found = {}
    for name, argv in VERSION_COMMANDS.items():
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        lines = (done.stdout or done.stderr).strip().splitlines()
        found[name] = lines[0] if lines else "unknown"
    return found


def write_manifest(outputs: dict[str, dict[str, object]]) -> None:
    """Write the manifest (after each output, so a failed run keeps the rest)."""
    order = [s.name for s in SPECS]
    manifest = {
        "versions": versions(),
        "outputs": [outputs[name] for name in order if name in outputs],
    }
    MANIFEST.write_text(
        json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def capture(spec: Spec) -> dict[str, object]:
    """Build one output in a fresh workspace; store it; return its manifest entry."""
    with tempfile.TemporaryDirectory(prefix=f"survival-{spec.name}-") as tmp:
        done = spec.build(Path(tmp))
    if len(done.text) < MIN_CHARS:
        msg = f"{spec.name}: only {len(done.text)} chars (exit {done.exit_code})"
        raise SystemExit(msg)
    data = done.text.encode("utf-8", "surrogatepass")
    file_name = f"{spec.name}.txt.xz"
    (CORPUS / file_name).write_bytes(
        lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
    )
    return {
        "name": spec.name,
        "program": spec.program,
        "argv": done.argv,
        "exit_code": done.exit_code,
        "bytes": len(data),
        "lines": done.text.count("\n"),
        "file": file_name,
        "needles": [asdict(n) for n in mark_needles(done.text, done.rule)],
    }


def build(only: set[str] | None) -> int:
    """Run every spec (or `only` these), write the outputs and the manifest."""
    CORPUS.mkdir(exist_ok=True)
    old = json.loads(MANIFEST.read_text(encoding="utf-8")) if MANIFEST.exists() else {}
    outputs = {o["name"]: o for o in old.get("outputs", [])}
    started = time.perf_counter()
    for spec in SPECS:
        if only and spec.name not in only:
            continue
        t0 = time.perf_counter()
        entry = outputs[spec.name] = capture(spec)
        write_manifest(outputs)
        marked = entry["needles"]
        assert isinstance(marked, list)
        print(
            f"{spec.name:32} exit {entry['exit_code']:3}  {entry['bytes']:>9,} bytes  "
            f"{len(marked):2} needles  {time.perf_counter() - t0:5.1f} s"
        )
    print(f"built in {time.perf_counter() - started:.0f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and build."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [spec.name for spec in SPECS]
    parser.add_argument("--only", nargs="+", choices=names, help="rebuild these")
    args = parser.parse_args(argv)
    return build(set(args.only) if args.only else None)


if __name__ == "__main__":
    sys.exit(main())
