"""The `spillvault` command line; later features add their subcommands here."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from spillvault.adapters.cli.rules import add_rules_command
from spillvault.adapters.cli.run import (
    EXIT_NOT_FOUND,
    EXIT_OWN_FAILURE,
    CommandNotStartedError,
)
from spillvault.adapters.cli.run_gate import run_command
from spillvault.adapters.hooks.registry import CLIENT_MODULES
from spillvault.adapters.mcp.limits import (
    DEFAULT_RESULT_CHARS,
    MAX_RESULT_CHARS,
    MIN_RESULT_CHARS,
)
from spillvault.adapters.owners.owner_common import ArtifactOwnerError
from spillvault.adapters.storage.s3_client import ARTIFACTS_ENV, EVENT_STORE_ENV
from spillvault.domain.bounds import MAX_SIZE, shown
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactRetentionError,
    ObjectStoreConfigError,
    SpillPolicyError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

EXIT_USAGE = 2
CLIENT_NAMES: Final = tuple(sorted(CLIENT_MODULES))
EXIT_REFUSED = 3
EXIT_FAILED = 4

# ASCII digits only, and few of them: int() also takes "١٢" and "1_000" and
# refuses more than 4300 digits with a bare ValueError; none of that is a flag.
_INTEGER: Final = re.compile(r"[0-9]{1,19}")
_DURATION: Final = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,9})?)([smhd]?)")
_SECONDS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_SECONDS: Final = timedelta.max.days * 86400


def _integer_flag(low: int, what: str, high: int = MAX_SIZE) -> Callable[[str], int]:
    """Return an argparse type: `what`, a decimal integer from `low` to `high`."""

    def parse(text: str) -> int:
        number = int(text) if _INTEGER.fullmatch(text) else None
        if number is None or not low <= number <= high:
            msg = f"must be {what} from {low} to {high}, not {shown(text)}"
            raise argparse.ArgumentTypeError(msg)
        return number

    return parse


def _timeout_seconds(text: str) -> float | None:
    """Parse `--timeout` as a duration; 0 means none, as for timeout(1)."""
    seconds = parse_duration(text).total_seconds()
    return seconds or None


def byte_range(text: str) -> tuple[int, int]:
    """Parse `--bytes START:END` (0-based, END exclusive, START <= END)."""
    start, sep, end = text.partition(":")
    low, high = (int(n) if _INTEGER.fullmatch(n) else None for n in (start, end))
    if not sep or low is None or high is None or not low <= high <= MAX_SIZE:
        msg = (
            f"must be START:END, integers with 0 <= START <= END <= {MAX_SIZE}, "
            f"not {shown(text)}"
        )
        raise argparse.ArgumentTypeError(msg)
    return low, high


def parse_duration(text: str) -> timedelta:
    """Parse `90`, `90s`, `5m`, `24h` or `2d`, up to 999999999 days."""
    match = _DURATION.fullmatch(text.strip())
    seconds = None if match is None else float(match[1]) * _SECONDS[match[2]]
    if seconds is None or seconds > MAX_DURATION_SECONDS:
        msg = (
            f"not a duration up to 999999999 days: {shown(text)} "
            "(use e.g. 90s, 5m, 24h, 2d)"
        )
        raise argparse.ArgumentTypeError(msg)
    return timedelta(seconds=seconds)


def package_version() -> str:
    """Return the installed spillvault's version."""
    # Read only when asked: importlib.metadata costs every command ~20 ms to load.
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("spillvault")
    except PackageNotFoundError:  # pragma: no cover - running from an unusual layout
        return "0+unknown"


class _VersionAction(argparse.Action):
    """`--version`: the installed version, looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
        sys.stdout.write(f"{parser.prog} {package_version()}\n")
        parser.exit()


def _run_demo(args: argparse.Namespace) -> int:
    from spillvault.adapters.cli.demo import run_demo  # noqa: PLC0415 - load only what the command needs

    return run_demo(args.dir, out=sys.stdout.write, keep=args.keep, as_json=args.json)


def _handler(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from spillvault.adapters.cli import commands as cli_commands  # noqa: PLC0415 - load only what the command needs

        handler: Callable[[argparse.Namespace], int] = getattr(cli_commands, name)
        return handler(args)

    return run


def _session_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session",
        metavar="DIR|ID",
        help="the session: a directory if it contains a '/', else a session id "
        "under $SPILLVAULT_HOME (default: $SPILLVAULT_SESSION; a handle finds "
        "its own session; run makes a new one)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _add_artifact_commands(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run a command and print what the model would see of its output",
    )
    _session_option(run)
    run.add_argument("--tool", default="bash", help="tool name for the limits (bash)")
    run.add_argument("--policy", metavar="FILE", help="a TOML spill policy")
    run.add_argument(
        "--timeout",
        type=_timeout_seconds,
        metavar="DURATION",
        help="kill the command's process group after DURATION (90, 90s, 5m); "
        "the output so far is kept as a partial artifact, and the exit status is 124",
    )
    run.add_argument(
        "--tee",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="copy the output to stderr as it arrives (default: when stdout is a "
        "terminal)",
    )
    run.add_argument(
        "--fail-open",
        action="store_true",
        help="if spillvault cannot open its session, run the command as it is "
        "(what hooks use: a rewrite never costs the agent its command)",
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    run.set_defaults(handler=run_command, failure_status=EXIT_OWN_FAILURE)

    read = commands.add_parser("read", help="print verified lines or bytes")
    _session_option(read)
    read.add_argument("handle")
    read.add_argument(
        "--line",
        type=_integer_flag(1, "a 1-based line number"),
        default=1,
        help="first line, 1-based (1)",
    )
    read.add_argument(
        "--limit",
        type=_integer_flag(0, "a line count"),
        default=2000,
        help="lines (2000)",
    )
    read.add_argument(
        "--bytes",
        metavar="A:B",
        type=byte_range,
        help="a byte range instead of lines; a page is cut on UTF-8 characters",
    )
    read.add_argument(
        "--raw",
        action="store_true",
        help="show secrets as stored (masked by default); with --bytes and no "
        "--json: write exactly those bytes, undecoded and uncut",
    )
    read.set_defaults(handler=_handler("read_command"), usage_error=read.error)

    grep = commands.add_parser("grep", help="search an artifact (literal by default)")
    _session_option(grep)
    grep.add_argument("handle")
    grep.add_argument("pattern")
    grep.add_argument(
        "-C",
        dest="context",
        type=_integer_flag(0, "a line count"),
        default=None,
        help="context lines; groups are parted by --, as in GNU grep",
    )
    grep.add_argument(
        "--max",
        type=_integer_flag(0, "a match count"),
        default=100,
        help="matches to show (100)",
    )
    grep.add_argument("--regex", action="store_true", help="a regular expression")
    grep.add_argument(
        "--raw", action="store_true", help="show secrets as stored (masked by default)"
    )
    grep.add_argument(
        "--from",
        dest="start",
        type=_integer_flag(1, "a 1-based line number"),
        default=1,
        help="first line, 1-based (1)",
    )
    grep.set_defaults(handler=_handler("grep_command"))

    listing = commands.add_parser(
        "ls", help="list the artifacts of a session, or of every session under the root"
    )
    _session_option(listing)
    listing.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the handles, oldest first",
    )
    listing.set_defaults(handler=_handler("ls_command"))


def _lease_handler(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from spillvault.adapters.cli import leases as cli_leases  # noqa: PLC0415 - load only what the command needs

        handler: Callable[[argparse.Namespace], int] = getattr(cli_leases, name)
        return handler(args)

    return run


def _add_lease_commands(commands: Any) -> None:
    journal = commands.add_parser("journal", help="check or rebuild the lease journal")
    journal_commands = journal.add_subparsers(dest="journal_command", required=True)
    verify = journal_commands.add_parser(
        "verify", help="verify every record against the event store"
    )
    _session_option(verify)
    verify.set_defaults(handler=_lease_handler("journal_verify_command"))
    repair = journal_commands.add_parser(
        "repair", help="rebuild it from the event store, keeping the old file aside"
    )
    _session_option(repair)
    repair.set_defaults(handler=_lease_handler("journal_repair_command"))

    owner_help = "the memory owner: sqlite:PATH or postgres:DSN"
    reconcile = commands.add_parser(
        "reconcile", help="settle prepared and committed leases with their owner"
    )
    _session_option(reconcile)
    reconcile.add_argument("--owner", required=True, help=owner_help)
    reconcile.add_argument(
        "--min-age",
        type=parse_duration,
        default="5m",
        help="leave younger prepared leases alone (5m)",
    )
    reconcile.set_defaults(handler=_lease_handler("reconcile_command"))

    lease = commands.add_parser("lease", help="operator actions on one lease")
    lease_commands = lease.add_subparsers(dest="lease_command", required=True)
    resolve = lease_commands.add_parser(
        "resolve", help="commit or abort a prepared lease, checked through the owner"
    )
    _session_option(resolve)
    resolve.add_argument("transaction_id", metavar="TX")
    resolve.add_argument("--owner", required=True, help=owner_help)
    decision = resolve.add_mutually_exclusive_group(required=True)
    decision.add_argument("--abort", action="store_true", help="seal, then abort")
    decision.add_argument("--commit", action="store_true", help="owner must hold it")
    resolve.add_argument("--reason", required=True, help="why (kept in the output)")
    resolve.set_defaults(handler=_lease_handler("lease_resolve_command"))


def _run_gc(args: argparse.Namespace) -> int:
    from spillvault.adapters.cli.gc import gc_command  # noqa: PLC0415 - load only what the command needs

    return gc_command(args)


def _add_gc_command(commands: Any) -> None:
    gc = commands.add_parser(
        "gc", help="plan (and with --apply, do) deleting what nothing protects"
    )
    _session_option(gc)
    gc.add_argument(
        "--ttl",
        type=parse_duration,
        default="24h",
        help="orphan TTL: keep younger files (24h)",
    )
    gc.add_argument(
        "--max",
        type=_integer_flag(0, "a deletion count"),
        default=None,
        metavar="N",
        help="delete at most N (oldest); with --all-sessions, N in all, sessions "
        "taken oldest first",
    )
    gc.add_argument("--apply", action="store_true", help="delete (default: dry run)")
    gc.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="name each file with its age, oldest first, under its status and reason",
    )
    gc.add_argument(
        "--all-sessions",
        action="store_true",
        help="every session under $SPILLVAULT_HOME, one at a time (not with "
        "--session); one that cannot be opened is reported and skipped (exit 4)",
    )
    gc.set_defaults(handler=_run_gc, usage_error=gc.error)


def _mcp_handler(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from spillvault.adapters.cli import mcp as cli_mcp  # noqa: PLC0415 - load only what the command needs

        handler: Callable[[argparse.Namespace], int] = getattr(cli_mcp, name)
        args.package_version = package_version()
        return handler(args)

    return run


def _limit_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        type=_integer_flag(MIN_RESULT_CHARS, "a character count", MAX_RESULT_CHARS),
        default=DEFAULT_RESULT_CHARS,
        help="the most characters a result may have, notice and structured stub "
        f"included ({DEFAULT_RESULT_CHARS}: under Claude Code's, Codex's and "
        "Gemini CLI's limits)",
    )


def _add_mcp_commands(commands: Any) -> None:
    mcp = commands.add_parser(
        "mcp", help="MCP: serve the artifact tools, or put a server behind the gate"
    )
    mcp_commands = mcp.add_subparsers(dest="mcp_command", required=True)
    serve = mcp_commands.add_parser(
        "serve",
        help="a stdio MCP server with read_artifact, grep_artifact, list_artifacts",
    )
    serve.add_argument(
        "--session",
        metavar="DIR|ID",
        help="serve only this session (default: every session under the root)",
    )
    _limit_option(serve)
    serve.set_defaults(handler=_mcp_handler("serve_command"))
    proxy = mcp_commands.add_parser(
        "proxy",
        help="run CMD as a stdio MCP server and serve it with every result gated",
    )
    proxy.add_argument(
        "--session",
        metavar="DIR|ID",
        help="the session spilled results go to (default: $SPILLVAULT_SESSION, "
        "else a new one, made on the first spill)",
    )
    _limit_option(proxy)
    proxy.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    proxy.set_defaults(handler=_mcp_handler("proxy_command"))


def _hook_handler(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from spillvault.adapters.cli import hooks as cli_hooks  # noqa: PLC0415 - load only what the command needs

        handler: Callable[[argparse.Namespace], int] = getattr(cli_hooks, name)
        return handler(args)

    return run


def _add_hook_commands(commands: Any) -> None:
    hook = commands.add_parser(
        "hook", help="gate a coding agent's built-in tools through its own hooks"
    )
    hook_commands = hook.add_subparsers(dest="hook_command", required=True)
    clients = ", ".join(CLIENT_NAMES)
    for name, help_text, handler in (
        ("install", "add spillvault's hooks to the client's configuration",
         "install_command"),
        ("uninstall", "take them out (restoring the backup when the file is untouched)",
         "uninstall_command"),
        ("doctor", "run a canary through the installed hook, as the client would",
         "doctor_command"),
    ):  # fmt: skip
        sub = hook_commands.add_parser(name, help=help_text)
        sub.add_argument("client", choices=CLIENT_NAMES, metavar="CLIENT", help=clients)
        sub.add_argument(
            "--scope",
            choices=("user", "project"),
            default="user",
            help="the user's configuration, or the project's (user)",
        )
        sub.add_argument("--project", metavar="DIR", help="the project (default: .)")
        if name != "doctor":
            sub.add_argument(
                "--dry-run", action="store_true", help="show the change, write nothing"
            )
        sub.set_defaults(handler=_hook_handler(handler))
    status = hook_commands.add_parser("status", help="where the hooks are installed")
    status.add_argument("client", nargs="?", choices=CLIENT_NAMES, metavar="CLIENT")
    status.add_argument("--project", metavar="DIR", help="the project (default: .)")
    status.set_defaults(handler=_hook_handler("status_command"))
    run = hook_commands.add_parser(
        "run", help="answer one hook event: the command the clients run (JSON on stdin)"
    )
    run.add_argument("client", choices=CLIENT_NAMES, metavar="CLIENT", help=clients)
    run.add_argument("event", help="the client's event name, e.g. PreToolUse")
    run.set_defaults(handler=_hook_handler("run_command"))


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="spillvault",
        description=(
            "Store oversized tool results as verified artifacts, page them back, "
            "and keep what memory references alive (Linux only)."
        ),
    )
    parser.add_argument(
        "--version", action=_VersionAction, nargs=0, help="show the version and exit"
    )
    parser.add_argument(
        "--artifacts",
        metavar="s3://BUCKET/PREFIX",
        help="keep artifacts in this object store (default: $SPILLVAULT_ARTIFACTS; "
        "endpoint and credentials from the AWS variables)",
    )
    parser.add_argument(
        "--event-store",
        metavar="postgresql://DSN",
        help="the PostgreSQL event store a vault needs "
        "(default: $SPILLVAULT_EVENT_STORE)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="run a short scripted tour of what exists, for real"
    )
    demo.add_argument(
        "--dir",
        default=None,
        help="parent directory for the demo session (default: a temp dir)",
    )
    demo.add_argument(
        "--keep", action="store_true", help="leave the session dir and say where"
    )
    demo.add_argument("--json", action="store_true", help="one JSON object per event")
    demo.set_defaults(handler=_run_demo)
    _add_artifact_commands(commands)
    _add_lease_commands(commands)
    _add_gc_command(commands)
    _add_mcp_commands(commands)
    _add_hook_commands(commands)
    add_rules_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    # The composition root reads the vault from the environment, so hooks and
    # commands this one starts find the same vault.
    if args.artifacts is not None:
        os.environ[ARTIFACTS_ENV] = args.artifacts
    if args.event_store is not None:
        os.environ[EVENT_STORE_ENV] = args.event_store
    try:
        return handler(args)
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 - re-raised if unforeseen
        return failure_status(args, error)


_REFUSALS: Final = (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactRetentionError,
    ArtifactLeaseJournalError,
    ArtifactOwnerError,
    SpillPolicyError,
    ObjectStoreConfigError,
)


def failure_status(
    args: argparse.Namespace, error: Exception | KeyboardInterrupt
) -> int:
    """Report how a command failed and return its exit status; re-raise the rest."""
    own_failure: int | None = getattr(args, "failure_status", None)
    if isinstance(error, CommandNotStartedError):
        not_found = error.status == EXIT_NOT_FOUND
        code = "command_not_found" if not_found else "command_not_executable"
        return _fail(args, code, str(error), error.status)
    if isinstance(error, KeyboardInterrupt):
        # Ctrl-C outside a wrapped command's lifetime: quiet, as a shell reports it.
        return 128 + signal.SIGINT
    if isinstance(error, BrokenPipeError):
        # The reader left (`spillvault ls | head`): quiet, as `ls | head` is. The
        # interpreter's own flush at exit must not fail on the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    if isinstance(error, _REFUSALS):
        message = f"{type(error).__name__}: {error}"
        return _fail(args, _code_of(error), message, own_failure or EXIT_REFUSED)
    if isinstance(error, ValueError | OSError | TimeoutError):
        return _fail(args, _code_of(error), str(error), own_failure or EXIT_FAILED)
    raise error


def _fail(args: argparse.Namespace, code: str, message: str, status: int) -> int:
    """Report a failure in one stderr line, and as one JSON object under --json."""
    sys.stderr.write(f"spillvault: {message}\n")
    if getattr(args, "json", False):
        error = {"error": {"code": code, "message": message, "exit_status": status}}
        sys.stdout.write(json.dumps(error, ensure_ascii=False, sort_keys=True) + "\n")
    return status


def _code_of(error: BaseException) -> str:
    """Name an error for machines: its class name in snake_case."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__).lower()


if __name__ == "__main__":
    raise SystemExit(main())
