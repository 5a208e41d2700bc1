"""The `spillvault` command's first step: the hot paths skip the full CLI.

A hook runs on every tool call of an agent, and the command it wraps in
`spillvault run` too, so `spillvault hook run CLIENT EVENT` goes straight to
its handler and `spillvault run` as hooks write it is read on its own (see
`run_argv`), importing neither argparse nor the other commands nor, for a short
output, the session. Everything else, and any other `run`, loads the full
command line.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run the command line `sys.argv` names."""
    argv = sys.argv[1:]
    if len(argv) == 4 and argv[:2] == ["hook", "run"]:
        from spillvault.adapters.hooks.entry import main as run_hook  # noqa: PLC0415

        return run_hook(argv[2], argv[3])
    if argv[:1] == ["run"]:
        return _run(argv)
    return _full(argv)


def _run(argv: list[str]) -> int:
    """Run `spillvault run` through its own reader, failing as the full CLI does."""
    from spillvault.adapters.cli.run_argv import parse_run  # noqa: PLC0415
    from spillvault.adapters.cli.run_gate import run_command  # noqa: PLC0415

    args = parse_run(argv[1:])
    if args is None:
        return _full(argv)
    try:
        return run_command(args)
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 - re-raised if unforeseen
        from spillvault.adapters.cli.main import failure_status  # noqa: PLC0415 - rare

        return failure_status(args, error)


def _full(argv: list[str]) -> int:
    from spillvault.adapters.cli.main import main as full  # noqa: PLC0415

    return full(argv)


if __name__ == "__main__":
    raise SystemExit(main())
