"""Handler of `spillvault gc`: plan, and with --apply delete, the unprotected (S6)."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from spillvault.adapters.cli.sessions import open_existing
from spillvault.adapters.cli.tables import MISSING, age_text
from spillvault.adapters.services import gc
from spillvault.adapters.session import open_session, vault_from_environment
from spillvault.adapters.storage.object_store import vault_session_ids
from spillvault.adapters.storage.s3_client import s3_client
from spillvault.adapters.storage.session_root import session_root, sessions_under
from spillvault.domain.enums import ArtifactCleanupStatus as Status
from spillvault.domain.errors import ArtifactIntegrityError, ArtifactLeaseJournalError
from spillvault.domain.values import ArtifactCleanupPolicy

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from datetime import datetime, timedelta

    from spillvault.adapters.session import Session
    from spillvault.domain.cleanup import (
        ArtifactCleanupDecision,
        ArtifactCleanupPlan,
        ArtifactCleanupReport,
    )

EXIT_STOPPED = 4
LARGE = 200
"""Entries from which a run shows its progress."""
_BAR = 30
# What `main` reports as a failed run (ArtifactAccessError and
# ArtifactRetentionError are ValueErrors); under --all-sessions it fails one session.
_SKIPPING = (
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ValueError,
    OSError,
    TimeoutError,
)


class ProgressLine:
    """A progress bar on a terminal, a few plain lines elsewhere; silent when small."""

    def __init__(self, what: str, stream: TextIO) -> None:
        self._what = what
        self._stream = stream
        self._terminal = stream.isatty()
        self._shown = -1

    def __call__(self, done: int, total: int) -> None:
        """Show that `done` of `total` entries are done."""
        if total < LARGE:
            return
        if self._terminal:
            filled = _BAR * done // total
            bar = "#" * filled + "-" * (_BAR - filled)
            end = "\n" if done == total else ""
            self._stream.write(f"\r{self._what} [{bar}] {done}/{total}{end}")
        else:
            tenth = 10 * done // total
            if tenth == self._shown:
                return
            self._shown = tenth
            self._stream.write(f"{self._what}: {done}/{total}\n")
        self._stream.flush()


def _table(
    decisions: tuple[ArtifactCleanupDecision, ...], *, now: datetime, verbose: bool
) -> list[str]:
    """Count decisions by status, then reason; with `verbose`, name the files."""
    by_status: dict[str, dict[str, list[ArtifactCleanupDecision]]] = {}
    for decision in decisions:
        reasons = by_status.setdefault(decision.status.value, {})
        reasons.setdefault(decision.reason.value, []).append(decision)
    lines = []
    for status, reasons in sorted(by_status.items()):
        lines.append(f"{sum(map(len, reasons.values())):>7}  {status}")
        for reason, group in sorted(reasons.items()):
            lines.append(f"{'':>9}{len(group):>5} x {reason}")
            if verbose:
                lines.extend(_file_lines(group, now))
    return lines or ["nothing in tool-results/"]


def _file_lines(group: list[ArtifactCleanupDecision], now: datetime) -> list[str]:
    """Name each file with its age, oldest first; files of no known age last."""
    aged = [(_age_seconds(decision, now), decision) for decision in group]
    # By the number of seconds, never by the rendered text ("10d" < "2d").
    aged.sort(key=lambda pair: (pair[0] is None, -(pair[0] or 0), pair[1].filename))
    return [
        f"{'':>17}{MISSING if age is None else age_text(age):>5}  "
        f"{decision.filename}  {decision.detail}".rstrip()
        for age, decision in aged
    ]


def _age_seconds(decision: ArtifactCleanupDecision, now: datetime) -> float | None:
    """Return how old the file was at `now`, by the mtime the scan froze."""
    snapshot = decision.snapshot
    return None if snapshot is None else now.timestamp() - snapshot.mtime_ns / 1e9


def gc_command(args: argparse.Namespace) -> int:
    """Plan GC (a dry run unless --apply); print counts and reasons."""
    if getattr(args, "all_sessions", False):
        return _gc_all_sessions(args)
    with open_existing(args) as session:
        plan, report = _collect(session, _policy(args, args.max))
    if args.json:
        data = {"plan": plan.to_dict(), "report": report.to_dict()}
        sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_text(_result_lines(args, plan, report)))
    if report.error is not None:
        sys.stderr.write(f"spillvault: {_stopped(report)}\n")
        return EXIT_STOPPED
    return 0


def _gc_all_sessions(args: argparse.Namespace) -> int:
    """Run GC over every session under the root, one at a time, each on its own."""
    if getattr(args, "session", None):
        usage_error: Callable[[str], NoReturn] = args.usage_error
        usage_error("--all-sessions and --session are mutually exclusive: pass one")
    root = session_root()
    vault = vault_from_environment()
    if vault:
        ids = vault_session_ids(vault["artifacts"], s3_client())
        paths = [os.path.join(root, session_id) for session_id in ids]
        where = vault["artifacts"].url
    else:
        paths, where = sessions_under(root), root
    if not paths and not args.json:
        sys.stdout.write(f"no sessions under {where}\n")
    entries: list[dict[str, Any]] = []
    left: int | None = args.max  # --max bounds the whole run, not each session
    for path in paths:
        entry, lines = _gc_session(args, path, left)
        entries.append(entry)
        # Planned, not deleted: a dry run spends the budget as --apply would.
        if left is not None and "plan" in entry:
            left -= entry["plan"]["counts"].get(Status.PLANNED_DELETE, 0)
        if not args.json:
            sys.stdout.write(_text(lines))
    failed = [entry["session"] for entry in entries if _failed(entry)]
    totals = {
        "sessions": len(entries),
        "planned_delete": _total(entries, "plan", Status.PLANNED_DELETE),
        "deleted": _total(entries, "report", Status.DELETED),
        "failed": len(failed),
        "dry_run": not args.apply,
    }
    if args.json:
        data = {"sessions": entries, "totals": totals}
        sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
    elif entries:
        sys.stdout.write(_text([_totals_line(totals)]))
    if failed:
        sys.stderr.write(
            f"spillvault: gc failed on {len(failed)} of {len(entries)} sessions: "
            f"{', '.join(failed)}\n"
        )
        return EXIT_STOPPED
    return 0


def _gc_session(
    args: argparse.Namespace, path: str, max_deletions: int | None
) -> tuple[dict[str, Any], list[str]]:
    """Run GC on one session; return its JSON entry and its lines of text."""
    entry: dict[str, Any] = {"session": os.path.basename(path), "path": path}
    lines = [f"== session {entry['session']} =="]
    try:
        # Opened here, so a broken session fails alone and nothing in it is touched.
        with open_session(path, mode="open", **vault_from_environment()) as session:
            plan, report = _collect(session, _policy(args, max_deletions))
    except _SKIPPING as error:
        message = f"{type(error).__name__}: {error}"
        entry["error"] = {"code": _code_of(error), "message": message}
        return entry, [*lines, f"skipped: {message}"]
    entry |= {"plan": plan.to_dict(), "report": report.to_dict()}
    if report.error is not None:
        sys.stderr.write(
            f"spillvault: session {entry['session']}: {_stopped(report)}\n"
        )
    return entry, lines + _result_lines(args, plan, report)


def _failed(entry: dict[str, Any]) -> bool:
    """Say whether a session was skipped, or its run stopped on an I/O error."""
    return "error" in entry or entry["report"]["error"] is not None


def _total(entries: list[dict[str, Any]], part: str, status: Status) -> int:
    """Count `status` over the `part` ("plan" or "report") of every session run."""
    return sum(
        entry[part]["counts"].get(status, 0) for entry in entries if part in entry
    )


def _policy(
    args: argparse.Namespace, max_deletions: int | None
) -> ArtifactCleanupPolicy:
    """Return the policy the flags ask for, with at most `max_deletions`."""
    ttl: timedelta = args.ttl  # parsed and bounded by the --ttl flag's type
    return ArtifactCleanupPolicy(
        orphan_ttl_seconds=ttl.total_seconds(),
        max_deletions=max_deletions,
        dry_run=not args.apply,
    )


def _collect(
    session: Session, policy: ArtifactCleanupPolicy
) -> tuple[ArtifactCleanupPlan, ArtifactCleanupReport]:
    """Plan GC on an open session, then apply the plan (nothing on a dry run)."""
    plan = gc.plan_cleanup_from_journal(
        session, policy=policy, progress=ProgressLine("planning", sys.stderr)
    )
    report = gc.apply_cleanup_from_journal(
        session, plan, progress=ProgressLine("deleting", sys.stderr)
    )
    return plan, report


def _result_lines(
    args: argparse.Namespace, plan: ArtifactCleanupPlan, report: ArtifactCleanupReport
) -> list[str]:
    """Return the plan's table, then the dry-run hint or the table of what was done."""
    verbose = getattr(args, "verbose", False)  # -v names the files
    when = plan.planned_at
    lines = ["plan:", *_table(plan.decisions, now=when, verbose=verbose)]
    if report.dry_run:
        lines.append(
            f"dry run: {len(plan.candidates())} would be deleted; "
            "run again with --apply"
        )
    else:
        lines += ["applied:", *_table(report.decisions, now=when, verbose=verbose)]
    return lines


def _stopped(report: ArtifactCleanupReport) -> str:
    """Say that an I/O error stopped a run, and how much it left."""
    return (
        f"gc stopped on an I/O error: {report.error}; "
        f"{len(report.untouched)} candidates left untouched"
    )


def _totals_line(totals: dict[str, Any]) -> str:
    """Sum up a run over every session in one line."""
    done = (
        f"{totals['planned_delete']} would be deleted"
        if totals["dry_run"]
        else f"{totals['deleted']} deleted"
    )
    return f"total: {totals['sessions']} sessions, {done}, {totals['failed']} failed"


def _code_of(error: BaseException) -> str:
    """Name an error as `main` does under --json (main imports us: no cycle)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__).lower()


def _text(lines: list[str]) -> str:
    """Join lines for one write, each ended by a newline."""
    return "".join(line + "\n" for line in lines)
