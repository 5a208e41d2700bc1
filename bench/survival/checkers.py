"""Corpus builders: linters and type checkers (eslint, ruff, mypy)."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from capture import (
    HERE,
    NODE_BIN,
    Run,
    append,
    copy_stdlib,
    run,
    venv,
    write,
)
from needles import Rule

if TYPE_CHECKING:
    from pathlib import Path


def build_eslint(work: Path) -> Run:
    """`eslint .` on 40 files: unused-variable warnings, three errors planted."""
    shutil.copytree(HERE / "node_modules", work / "node_modules", symlinks=True)
    write(
        work / "eslint.config.mjs",
        "import js from '@eslint/js';\n"
        "export default [js.configs.recommended, { rules: {\n"
        "  'no-unused-vars': 'warn', 'prefer-const': 'warn',\n"
        "  'no-var': 'warn', eqeqeq: 'warn' },\n"
        "  languageOptions: { globals: { console: 'readonly' } } }];\n",
    )
    plants = {
        3: "  return undefinedCarrier.id;",
        20: "  if (x = 3) { debugger; }",
        39: "  const dup = { kg: 1, kg: 2 }; return dup;",
    }
    for f in range(40):
        lines = []
        for i in range(25):
            lines += [
                f"export function crate{i}(x, unusedArg{i}) {{",
                f"  var tmp{i} = x == null ? 0 : x;",
                f"  let out{i} = tmp{i} + 1;",
            ]
            if i == 12 and f in plants:
                lines.append(plants[f])
            lines += [f"  return out{i};", "}"]
        write(work / "src" / f"crate{f:02d}.js", "\n".join(lines) + "\n")
    rule = Rule(
        diagnostic=r"^\s+\d+:\d+\s+error\s",
        summary=r"^✖ \d+ problems?",
        planted=(
            r"'undefinedCarrier' is not defined",
            r"Unexpected assignment within an 'if'|Unexpected 'debugger'",
            r"Duplicate key 'kg'",
        ),
    )
    return run([str(NODE_BIN / "eslint"), "src"], work, rule)


def build_ruff(work: Path) -> Run:
    """`ruff check --select ALL` on a copy of stdlib email and json; 2 planted bugs."""
    copy_stdlib(["email", "json"], work / "mailkit")
    append(
        work / "mailkit" / "email" / "charset.py",
        "\n\ndef charset_total():\n    return len(undefined_charset_table)\n",
    )
    append(
        work / "mailkit" / "json" / "tool.py",
        "\n\ndef _dump_all(paths):\n"
        "    import os\n"
        "    return [p for p in paths if p == p]\n",
    )
    rule = Rule(
        diagnostic=r"^(F\d+|E9\d+|PLE\d+) ",
        summary=r"^Found \d+ errors?",
        planted=(
            r"^F821 Undefined name `undefined_charset_table`",
            r"^PLR0124 Name compared with itself",
        ),
        location_next=r"^\s*--> ",
    )
    return run(
        [venv("ruff"), "check", "--no-cache", "--select", "ALL", "mailkit"], work, rule
    )


def build_ruff_format(work: Path) -> Run:
    """`ruff format --diff` on a copy of stdlib modules, one file fails to parse."""
    copy_stdlib(["logging", "unittest", "argparse.py", "calendar.py"], work / "pkg")
    write(work / "pkg" / "logging" / "quota.py", "def quota(:\n    return 1\n")
    rule = Rule(
        diagnostic=r"^error: ",
        summary=r"^\d+ files? would be reformatted",
        planted=(r"Failed to parse pkg/logging/quota\.py",),
    )
    return run([venv("ruff"), "format", "--no-cache", "--diff", "pkg"], work, rule)


def build_mypy(work: Path) -> Run:
    """`mypy --strict` on a copy of stdlib email, json and more; 3 bugs planted."""
    copy_stdlib(
        ["json", "csv.py", "textwrap.py", "shlex.py", "fnmatch.py", "glob.py", "email"],
        work / "mailkit",
    )
    append(
        work / "mailkit" / "csv.py",
        "\n\ndef header_width(names: list[str]) -> int:\n    return ', '.join(names)\n",
    )
    append(
        work / "mailkit" / "shlex.py",
        "\n\ndef quote_all(parts: list[str]) -> str:\n"
        "    return ' '.join(quote(p) for p in parts) + missing_suffix\n",
    )
    append(
        work / "mailkit" / "glob.py",
        "\n\ndef pattern_width(pattern: str) -> int:\n    return len(pattern) + 's'\n",
    )
    rule = Rule(
        diagnostic=r": error: ",
        summary=r"^Found \d+ errors? in",
        planted=(
            r'Incompatible return value type \(got "str", expected "int"\)',
            r'Name "missing_suffix" is not defined',
            r'Unsupported operand types for \+ \("int" and "str"\)',
        ),
    )
    return run(
        [venv("mypy"), "--strict", "--no-incremental", "mailkit"],
        work,
        rule,
    )
