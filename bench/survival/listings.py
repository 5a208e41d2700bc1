"""Corpus builders: listings with a look-up needle (cProfile, git, grep, ...)."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

from capture import (
    REPO,
    STDLIB,
    Run,
    copy_stdlib,
    run,
    venv,
    write,
)
from needles import Rule

if TYPE_CHECKING:
    from pathlib import Path


def build_cprofile(work: Path) -> Run:
    """`python -m cProfile -s tottime` of a script importing much of the stdlib."""
    write(
        work / "pack.py",
        "import argparse, email.parser, http.client, json, logging, tarfile\n"
        "import unittest, xml.dom.minidom, zipfile\n\n\n"
        "def slow_checksum(data):\n"
        "    total = 0\n"
        "    for b in data:\n"
        "        total = (total * 31 + b) % 1000003\n"
        "    return total\n\n\n"
        "for i in range(30):\n"
        "    slow_checksum(json.dumps(list(range(2000))).encode())\n",
    )
    rule = Rule(lookup=(r"pack\.py:\d+\(slow_checksum\)",))
    return run(
        [sys.executable, "-m", "cProfile", "-s", "tottime", "pack.py"], work, rule
    )


# ------------------------------------------------------------------- listings


def build_git_log(work: Path) -> Run:
    """`git log -p` over a fixed range of this repository's history."""
    rule = Rule(lookup=(r"^\+def parse_digests\(out: str\) -> dict\[str, str\]:",))
    argv = ["git", "log", "-p", "--no-color", "dc54c71~12..dc54c71"]
    return run(argv, work, rule, cwd_override=REPO)


def build_git_log_stat(work: Path) -> Run:
    """`git log --stat` over 80 commits of this repository's history."""
    rule = Rule(lookup=(r"^\s*adapters/mcp/catalog\.py\s+\|",))
    argv = ["git", "log", "--stat", "--no-color", "dc54c71~80..dc54c71"]
    return run(argv, work, rule, cwd_override=REPO)


def build_pip_show(work: Path) -> Run:
    """`pip show -f pip`: the venv's pip and every file it installed."""
    rule = Rule(lookup=(r"^\s*pip/_internal/req/req_install\.py$",))
    return run([venv("pip"), "show", "-f", "pip"], work, rule)


def build_dpkg(work: Path) -> Run:
    """`dpkg -l`: the system's installed packages."""
    rule = Rule(lookup=(r"^ii\s+make\s",))
    return run(["dpkg", "-l"], work, rule, env={"COLUMNS": "160"})


def build_grep(work: Path) -> Run:
    """`grep -rn "def "` over a copy of stdlib email, json, http, logging."""
    copy_stdlib(["email", "json", "http", "logging", "unittest"], work / "lib")
    rule = Rule(lookup=(r"lib/email/__init__\.py:\d+:def message_from_string\(",))
    return run(["grep", "-rn", "--color=never", "def ", "lib"], work, rule)


def build_find(work: Path) -> Run:
    """`find <stdlib> -name '*.py'`, sorted as `sort` would (the real tree)."""
    rule = Rule(lookup=(r"/json/decoder\.py$",))
    return run(
        ["bash", "-c", f"find {STDLIB} -name '*.py' | LC_ALL=C sort"], work, rule
    )


LISTED = [
    "email",
    "json",
    "http",
    "logging",
    "unittest",
    "asyncio",
    "xml",
    "encodings",
    "importlib",
    "concurrent",
    "lib2to3",
]


def build_ls(work: Path) -> Run:
    """`ls -lR` over stdlib packages, bytecode caches included (the real tree)."""
    rule = Rule(lookup=(r"\sbase64mime\.py$",))
    return run(["ls", "-lR", "--color=never", *LISTED], work, rule, cwd_override=STDLIB)


def build_tar(work: Path) -> Run:
    """`tar -tvf` of an archive of stdlib packages, bytecode caches included."""
    subprocess.run(
        ["tar", "-cf", str(work / "lib.tar"), "--sort=name", *LISTED],
        cwd=STDLIB,
        check=True,
    )
    rule = Rule(lookup=(r"http/cookiejar\.py$",))
    return run(["tar", "-tvf", "lib.tar"], work, rule)
