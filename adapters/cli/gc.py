"""Handler of `spillvault gc`: plan, and with --apply delete, the unprotected (S6)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, TextIO

from spillvault.adapters.cli.commands import open_existing
from spillvault.adapters.services import gc
from spillvault.domain.values import ArtifactCleanupPolicy

if TYPE_CHECKING:
    import argparse
    from datetime import timedelta

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


def _table(decisions: tuple[ArtifactCleanupDecision, ...]) -> list[str]:
    by_status: dict[str, dict[str, int]] = {}
    for decision in decisions:
        reasons = by_status.setdefault(decision.status.value, {})
        reason = decision.reason.value
        reasons[reason] = reasons.get(reason, 0) + 1
    lines = []
    for status in sorted(by_status):
        reasons = by_status[status]
        lines.append(f"{sum(reasons.values()):>7}  {status}")
        lines.extend(
            f"{'':>9}{count:>5} x {reason}" for reason, count in sorted(reasons.items())
        )
    return lines or ["nothing in tool-results/"]


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
        lines = ["plan:", *_table(plan.decisions)]
        if report.dry_run:
            lines.append(
                f"dry run: {len(plan.candidates())} would be deleted; "
                "run again with --apply"
            )
        else:
            lines += ["applied:", *_table(report.decisions)]
        sys.stdout.write("".join(line + "\n" for line in lines))
    if report.error is not None:
        sys.stderr.write(
            f"spillvault: gc stopped on an I/O error: {report.error}; "
            f"{len(report.untouched)} candidates left untouched\n"
        )
        return EXIT_STOPPED
    return 0
