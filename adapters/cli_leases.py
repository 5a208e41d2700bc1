"""Handlers of `spillvault journal`, `reconcile` and `lease resolve` (S4.5, S5)."""

from __future__ import annotations

import json
import re
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from spillvault.domain.enums import ArtifactLeasePhase

from .cli_commands import session_dir
from .session import open_session

if TYPE_CHECKING:
    import argparse

    from spillvault.domain.ports import ArtifactReferenceOwner
    from spillvault.domain.values import ArtifactReconciliationReport

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """Parse `90`, `90s`, `5m`, `24h` or `2d`."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        msg = f"not a duration: {text!r} (use e.g. 90s, 5m, 24h, 2d)"
        raise ValueError(msg)
    return timedelta(seconds=float(match[1]) * _SECONDS[match[2]])


def open_owner(spec: str) -> ArtifactReferenceOwner:
    """Open an existing `sqlite:PATH` or `postgres:DSN` owner; never create one."""
    kind, _, target = spec.partition(":")
    if not target:
        msg = f"--owner must be sqlite:PATH or postgres:DSN, not {spec!r}"
        raise ValueError(msg)
    if kind == "sqlite":
        from .sqlite_owner import SQLiteOwner  # noqa: PLC0415 - only what is used

        return SQLiteOwner(target, create=False)
    if kind in {"postgres", "postgresql"}:
        from .postgres_owner import PostgresOwner  # noqa: PLC0415 - optional extra

        return PostgresOwner(target, create=False)
    msg = f"unknown owner kind {kind!r}: use sqlite:PATH or postgres:DSN"
    raise ValueError(msg)


def _emit(args: argparse.Namespace, lines: list[str], data: object) -> None:
    if args.json:
        sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
    else:
        sys.stdout.write("".join(line + "\n" for line in lines))


def _report_lines(reports: list[ArtifactReconciliationReport]) -> list[str]:
    if not reports:
        return ["nothing to reconcile"]
    lines = [
        f"{r.transaction_id}: {r.status.value} ({r.reason}"
        + (
            ""
            if r.observed_generation is None
            else f", generation {r.observed_generation}"
        )
        + ")"
        for r in reports
    ]
    counts: dict[str, int] = {}
    for report in reports:
        counts[report.status.value] = counts.get(report.status.value, 0) + 1
    lines.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    return lines


def journal_verify_command(args: argparse.Namespace) -> int:
    """Verify the whole journal against the event store (catching up a short one)."""
    with open_session(session_dir(args)) as session:
        report = session.journal.verify()
    torn = f"; a torn tail of {report.torn_bytes} bytes" if report.torn_bytes else ""
    _emit(
        args,
        [f"journal ok: {report.records} records, {report.end} bytes{torn}"],
        {"ok": True, **report.to_dict()},
    )
    return 0


def journal_repair_command(args: argparse.Namespace) -> int:
    """Rebuild the journal from the event store; keep the damaged file aside (J7)."""
    with open_session(session_dir(args), recover=False) as session:
        report, kept = session.journal.repair()
    _emit(
        args,
        [f"journal rebuilt: {report.records} records; damaged file kept as {kept}"],
        {"kept_aside": kept, **report.to_dict()},
    )
    return 0


def reconcile_command(args: argparse.Namespace) -> int:
    """Reconcile PREPARED leases, then COMMITTED ones, with a memory owner (S5.2)."""
    owner = open_owner(args.owner)
    with open_session(session_dir(args)) as session:
        journal = session.journal
        reports = journal.reconcile_pending(owner, min_age=parse_duration(args.min_age))
        reports += journal.reconcile_releases(owner)
    _emit(args, _report_lines(reports), [r.to_dict() for r in reports])
    return 0


def lease_resolve_command(args: argparse.Namespace) -> int:
    """Apply an operator's decision to a PREPARED lease, through the owner's fence."""
    owner = open_owner(args.owner)
    decision = (
        ArtifactLeasePhase.ABORTED if args.abort else ArtifactLeasePhase.COMMITTED
    )
    with open_session(session_dir(args)) as session:
        report = session.journal.resolve(
            args.transaction_id, owner, decision=decision, reason=args.reason
        )
    data: dict[str, Any] = {**report.to_dict(), "operator_reason": args.reason}
    _emit(args, _report_lines([report])[:1], data)
    return 0
