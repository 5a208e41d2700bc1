"""How a command prints its answer: the text, or one JSON object under `--json`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def emit(args: argparse.Namespace, text: str, data: dict[str, Any]) -> None:
    """Print `text` ending in a newline, or `data` as one JSON line under --json."""
    if args.json:
        import json  # noqa: PLC0415 - a wrapped command prints text; keep it light

        sys.stdout.write(json.dumps(data, ensure_ascii=False, sort_keys=True) + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


__all__ = ["emit"]
