"""Corpus builders: package managers (pip, npm) and application logs."""

from __future__ import annotations

import json
import shutil
import sys
from typing import TYPE_CHECKING

from capture import (
    HERE,
    Run,
    run,
    venv,
    write,
)
from needles import Rule
from runners import NODE_PLANTS, node_tests

if TYPE_CHECKING:
    from pathlib import Path


def build_pip(work: Path) -> Run:
    """`pip install -v` of a local package whose build step fails."""
    pkg = work / "labelprinter"
    write(
        pkg / "pyproject.toml",
        '[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n',
    )
    write(
        pkg / "setup.py",
        "import sys\nfrom setuptools import setup\n"
        "for i in range(1500):\n"
        "    print(f'generating glyph table {i:04d}: 96 glyphs, 12 kerning pairs')\n"
        "    if i == 1499:\n"
        "        raise RuntimeError('font file fonts/label-mono.ttf is truncated'\n"
        "                           ' (read 812 of 4096 bytes)')\n"
        "setup(name='labelprinter', version='1.0')\n",
    )
    rule = Rule(
        diagnostic=r"^\s*(error|ERROR)\b|^\s*\w+Error: ",
        planted=(r"RuntimeError: font file fonts/label-mono\.ttf is truncated",),
    )
    return run(
        [
            venv("pip"),
            "install",
            "-v",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",
            "./labelprinter",
        ],
        work,
        rule,
    )


def build_pip_resolve(work: Path) -> Run:
    """`pip install -v --dry-run` of a requirements file with one unknown package."""
    lines = [
        "pytest",
        "attrs",
        "idna",
        "labelprinter-spillvault-missing==9.9",
        "jsonschema",
    ]
    write(work / "requirements.txt", "\n".join(lines) + "\n")
    rule = Rule(
        diagnostic=r"^ERROR: ",
        planted=(
            r"No matching distribution found for labelprinter-spillvault-missing",
        ),
    )
    return run(
        [
            venv("pip"),
            "install",
            "-vv",
            "--dry-run",
            "--no-cache-dir",
            "--ignore-installed",
            "-r",
            "requirements.txt",
        ],
        work,
        rule,
    )


def build_npm(work: Path) -> Run:
    """`npm install --loglevel=silly` of the bench's packages, one never published."""
    package = json.loads((HERE / "package.json").read_text(encoding="utf-8"))
    package["dependencies"]["@eslint/js"] = "99.0.0"
    write(work / "app" / "package.json", json.dumps(package, indent=2))
    rule = Rule(
        diagnostic=r"^npm (error|ERR!) (code |notarget No matching)",
        planted=(
            r"^npm error notarget No matching version found for @eslint/js@99\.0\.0",
        ),
    )
    return run(
        [
            "npm",
            "install",
            "--loglevel=silly",
            "--no-audit",
            "--no-fund",
            "--cache",
            str(work / "npm-cache"),
        ],
        work / "app",
        rule,
    )


def build_npm_test(work: Path) -> Run:
    """`npm test` running node --test (spec reporter) with two failures."""
    node_tests(work, {700: NODE_PLANTS[1001], 1600: NODE_PLANTS[1995]})
    files = " ".join(f"orders{f}.test.mjs" for f in range(4))
    write(
        work / "package.json",
        json.dumps(
            {
                "name": "shipping",
                "version": "1.0.0",
                "private": True,
                "scripts": {"test": f"node --test --test-reporter=spec {files}"},
            }
        ),
    )
    rule = Rule(
        diagnostic=r"^\s*✖ |^npm (error|ERR!) ",
        summary=r"^\u2139 fail \d+",
        planted=(r"✖ ships order (700|1600)\b",),
    )
    return run(["npm", "test", "--no-update-notifier"], work, rule)


# ------------------------------------------------------------------------ logs


def dispatch_log(work: Path, args: list[int], level: str) -> list[str]:
    """Copy the dispatch log script into `work`; return the argv that runs it."""
    shutil.copy(HERE / "dispatch_log.py", work / "dispatch.py")
    return [sys.executable, "dispatch.py", *map(str, args), level]


def build_log(work: Path) -> Run:
    """A Python logging run: INFO/DEBUG noise, errors at start, middle, end."""
    n = 9000
    argv = dispatch_log(work, [n, 40, n // 2, n - 30], "info")
    rule = Rule(
        diagnostic=r" (ERROR|CRITICAL) |^\w+Error: |^Traceback",
        planted=(
            r"carrier API rejected credentials",
            r"settlement failed for order",
            r"^KeyError: 'fedex'",
            r"pool exhausted",
        ),
    )
    return run(argv, work, rule)


def build_log_warnings(work: Path) -> Run:
    """A long logging run with WARNING noise and one traceback near the end."""
    n = 7000
    argv = dispatch_log(work, [n, -1, n - 400, -1], "warning")
    rule = Rule(
        diagnostic=r" (ERROR|CRITICAL) |^\w+Error: |^Traceback",
        planted=(r"settlement failed for order", r"^KeyError: 'fedex'"),
    )
    return run(argv, work, rule)
