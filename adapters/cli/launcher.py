"""The `spillvault` command's first step: the hook hot path skips the full CLI.

A hook runs on every tool call of an agent, so `spillvault hook run CLIENT
EVENT` goes straight to its handler, importing neither argparse nor the
commands; everything else loads the full command line.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run the command line `sys.argv` names."""
    argv = sys.argv[1:]
    if len(argv) == 4 and argv[:2] == ["hook", "run"]:
        from spillvault.adapters.hooks.entry import main as run_hook  # noqa: PLC0415

        return run_hook(argv[2], argv[3])
    from spillvault.adapters.cli.main import main as full  # noqa: PLC0415

    return full()


if __name__ == "__main__":
    raise SystemExit(main())
