"""Handler of `spillvault gc`: plan, and with --apply delete, the unprotected (S6)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, TextIO

from spillvault.adapters.cli.sessions import open_existing
from spillvault.adapters.cli.tables import MISSING, age_text
from spillvault.adapters.services import gc
from spillvault.domain.values import ArtifactCleanupPolicy

if TYPE_CHECKING:
    import argparse
    from datetime import datetime, timedelta

    from spillvault.domain.cleanup import ArtifactCleanupDecision

EXIT_STOPPED = 4
LARGE = 200
"""Entries from which a run shows its progress."""
_BAR = 30


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
    ttl: timedelta = args.ttl  # parsed and bounded by the --ttl flag's type
    policy = ArtifactCleanupPolicy(
        orphan_ttl_seconds=ttl.total_seconds(),
        max_deletions=args.max,
        dry_run=not args.apply,
    )
    with open_existing(args) as session:
        plan = gc.plan_cleanup_from_journal(
            session, policy=policy, progress=ProgressLine("planning", sys.stderr)
        )
        report = gc.apply_cleanup_from_journal(
            session, plan, progress=ProgressLine("deleting", sys.stderr)
        )
    if args.json:
        data = {"plan": plan.to_dict(), "report": report.to_dict()}
        sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
    else:
        verbose = getattr(args, "verbose", False)  # -v names the files
        when = plan.planned_at
        lines = ["plan:", *_table(plan.decisions, now=when, verbose=verbose)]
        if report.dry_run:
            lines.append(
                f"dry run: {len(plan.candidates())} would be deleted; "
                "run again with --apply"
            )
        else:
            applied = _table(report.decisions, now=when, verbose=verbose)
            lines += ["applied:", *applied]
        sys.stdout.write("".join(line + "\n" for line in lines))
    if report.error is not None:
        sys.stderr.write(
            f"spillvault: gc stopped on an I/O error: {report.error}; "
            f"{len(report.untouched)} candidates left untouched\n"
        )
        return EXIT_STOPPED
    return 0
