"""domain/ is pure: no module imports the filesystem, databases or the network."""

from __future__ import annotations

import ast
from pathlib import Path

import spillvault.domain

FORBIDDEN = {
    "os", "io", "pathlib", "shutil", "sqlite3", "fcntl", "socket", "subprocess",
    "psycopg", "tempfile", "urllib", "http", "requests",
}  # fmt: skip


def imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_domain_module_imports_io() -> None:
    folder = Path(spillvault.domain.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert len(modules) >= 8
    offenders = {
        path.name: sorted(imported_roots(path.read_text()) & FORBIDDEN)
        for path in modules
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_checker_sees_an_offending_import() -> None:
    assert imported_roots("import os.path\nfrom sqlite3 import connect\n") == {
        "os",
        "sqlite3",
    }
