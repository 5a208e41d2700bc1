"""Handlers of `spillvault journal`, `reconcile` and `lease resolve` (S4.5, S5)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from spillvault.adapters.cli.sessions import (
    open_existing,
    open_for_reading,
    required_session,
)
from spillvault.adapters.session import open_session, vault_from_environment
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactLeasePhase
from spillvault.domain.errors import ArtifactLeaseJournalError

if TYPE_CHECKING:
    import argparse

    from spillvault.adapters.storage.journal_file import JournalFile
    from spillvault.adapters.storage.journal_table import JournalTable
    from spillvault.domain.ports import ArtifactReferenceOwner
    from spillvault.domain.values import ArtifactReconciliationReport


def open_owner(spec: str) -> ArtifactReferenceOwner:
    """Open an existing `sqlite:PATH` or `postgres:DSN` owner; never create one."""
    kind, _, target = spec.partition(":")
    if not target:
        msg = f"--owner must be sqlite:PATH or postgres:DSN, not {spec!r}"
        raise ValueError(msg)
    if kind == "sqlite":
        from spillvault.adapters.owners.sqlite_owner import SQLiteOwner  # noqa: PLC0415 - only what is used

        return SQLiteOwner(target, create=False)
    if kind in {"postgres", "postgresql"}:
        from spillvault.adapters.owners.postgres_owner import PostgresOwner  # noqa: PLC0415 - optional extra

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
    with open_for_reading(required_session(args)) as session:
        report = session.journal.verify()
    torn = f"; a torn tail of {report.torn_bytes} bytes" if report.torn_bytes else ""
    _emit(
        args,
        [f"journal ok: {report.records} records, {report.end} bytes{torn}"],
        {"ok": True, **report.to_dict()},
    )
    return 0


def _has_lines(journal: JournalFile | JournalTable) -> bool:
    """Say whether a journal holds any byte (a damaged one too)."""
    try:
        return bool(journal.read_from(0, limit=1))
    except ArtifactLeaseJournalError:
        return True  # unreadable is not empty: it is kept aside


def journal_repair_command(args: argparse.Namespace) -> int:
    """Rebuild the journal from the event store; keep the damaged file aside (J7)."""
    with open_session(
        required_session(args),
        mode="open",
        recover=False,
        **vault_from_environment(),
    ) as session:
        journal = session.open_journal()
        had_journal = _has_lines(journal)
        report, aside = session.journal.repair()
        # With no journal to replace, nothing was kept aside under that name.
        kept = None
        if had_journal:
            suffix = aside.removeprefix(RETENTION_JOURNAL_NAME + ".")
            kept = aside if session.artifacts is None else f"{journal.name}@{suffix}"
    where = "there was no journal to keep aside" if kept is None else f"kept as {kept}"
    _emit(
        args,
        [f"journal rebuilt: {report.records} records; {where}"],
        {"kept_aside": kept, **report.to_dict()},
    )
    return 0


def reconcile_command(args: argparse.Namespace) -> int:
    """Reconcile PREPARED leases, then COMMITTED ones, with a memory owner (S5.2)."""
    owner = open_owner(args.owner)
    with open_existing(args) as session:
        journal = session.journal
        # --min-age is parsed and bounded by its flag's type
        reports = journal.reconcile_pending(owner, min_age=args.min_age)
        reports += journal.reconcile_releases(owner)
    _emit(args, _report_lines(reports), [r.to_dict() for r in reports])
    return 0


def lease_resolve_command(args: argparse.Namespace) -> int:
    """Apply an operator's decision to a PREPARED lease, through the owner's fence."""
    owner = open_owner(args.owner)
    decision = (
        ArtifactLeasePhase.ABORTED if args.abort else ArtifactLeasePhase.COMMITTED
    )
    with open_existing(args) as session:
        report = session.journal.resolve(
            args.transaction_id, owner, decision=decision, reason=args.reason
        )
    data: dict[str, Any] = {**report.to_dict(), "operator_reason": args.reason}
    _emit(args, _report_lines([report])[:1], data)
    return 0
