"""The `spillvault` command line; later features add their subcommands here."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactLeaseJournalError,
    ArtifactRetentionError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

EXIT_USAGE = 2
EXIT_REFUSED = 3


def _version() -> str:
    from spillvault import __version__  # noqa: PLC0415 - avoid an import cycle

    return __version__


def _run_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo  # noqa: PLC0415 - load only what the command needs

    return run_demo(args.dir, out=sys.stdout.write)


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="spillvault",
        description=(
            "Store oversized tool results as verified artifacts, page them back, "
            "and keep what memory references alive (Linux only)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="run a short scripted tour of what exists, for real"
    )
    demo.add_argument(
        "--dir",
        default=None,
        help="parent directory for the demo session (default: a temp dir)",
    )
    demo.set_defaults(handler=_run_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return handler(args)
    except (
        ArtifactAccessError,
        ArtifactRetentionError,
        ArtifactLeaseJournalError,
    ) as error:
        sys.stderr.write(f"spillvault: {type(error).__name__}: {error}\n")
        return EXIT_REFUSED


if __name__ == "__main__":
    raise SystemExit(main())
