"""Regenerate or check the Mermaid diagrams: `python -m spillvault.specs [--write]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .loader import PACKAGED_SPECS, load_packaged_spec
from .mermaid import render_mermaid


def main(argv: list[str] | None = None) -> int:
    """Exit 1 when a diagram is stale (without --write), else 0."""
    parser = argparse.ArgumentParser(prog="python -m spillvault.specs")
    parser.add_argument("--write", action="store_true", help="rewrite stale diagrams")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent
    stale = []
    for name in PACKAGED_SPECS:
        path = here / f"{name}.mmd"
        wanted = render_mermaid(load_packaged_spec(name))
        current = path.read_text("utf-8") if path.exists() else None
        if current != wanted:
            stale.append(path.name)
            if args.write:
                path.write_text(wanted, "utf-8")
    verb = "rewrote" if args.write else "stale"
    for name in stale:
        sys.stdout.write(f"{verb}: {name}\n")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    raise SystemExit(main())
