"""What every corpus builder shares: paths, running a command, writing sources."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from needles import Rule

HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parent.parent
NODE_BIN: Final = HERE / "node_modules" / ".bin"
STDLIB: Final = Path(sysconfig.get_paths()["stdlib"])
VENV_BIN: Final = Path(sys.executable).parent
SEED: Final = 20  # issue 20: every generated source comes from this seed


@dataclass(frozen=True)
class Run:
    """One captured command: argv, exit code, merged output, its needle rule."""

    argv: list[str]
    exit_code: int
    text: str
    rule: Rule


def run(
    argv: list[str],
    cwd: Path,
    rule: Rule,
    env: dict[str, str] | None = None,
    cwd_override: Path | None = None,
) -> Run:
    """Run `argv` in `cwd` (or `cwd_override`) with stderr merged into stdout."""
    # Colour off, as a harness's pipe gets it; stderr into the same pipe, in order.
    full_env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", **(env or {})}
    full_env.pop("FORCE_COLOR", None)
    done = subprocess.run(
        argv,
        cwd=cwd_override or cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=full_env,
        check=False,
        timeout=600,
    )
    text = done.stdout.decode("utf-8", "replace")
    shown = [a.replace(str(cwd) + "/", "").replace(str(cwd), ".") for a in argv]
    return Run(shown, done.returncode, text, rule)


def write(path: Path, text: str) -> Path:
    """Write `text` to `path`, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def append(path: Path, text: str) -> None:
    """Append `text` to an existing file (a planted bug)."""
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def venv(tool: str) -> str:
    """The venv's copy of `tool`."""
    return str(VENV_BIN / tool)


def copy_stdlib(names: list[str], dest: Path) -> None:
    """Copy standard-library packages or modules under `dest` (a new package)."""
    dest.mkdir(parents=True, exist_ok=True)
    write(dest / "__init__.py", "")
    skip = shutil.ignore_patterns("__pycache__", "test", "tests")
    for name in names:
        src = STDLIB / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=skip)
        else:
            shutil.copy(src, dest / name)
