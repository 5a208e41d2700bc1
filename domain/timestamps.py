"""Timestamps are timezone-aware and stored as UTC ISO-8601 strings."""

from __future__ import annotations

from datetime import UTC, datetime

from .errors import ArtifactRetentionError


def parse_timestamp(value: datetime | str, field: str) -> datetime:
    """Return `value` as an aware UTC datetime, or raise naming `field`."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            msg = f"{field} is not an ISO-8601 timestamp: {value!r}"
            raise ArtifactRetentionError(msg) from None
    if not isinstance(value, datetime):
        msg = (
            f"{field} must be a datetime or ISO-8601 string, not {type(value).__name__}"
        )
        raise ArtifactRetentionError(msg)
    if value.tzinfo is None or value.utcoffset() is None:
        msg = f"{field} must be timezone-aware: {value.isoformat()}"
        raise ArtifactRetentionError(msg)
    return value.astimezone(UTC)


def format_timestamp(value: datetime) -> str:
    """Return the canonical stored form of an aware datetime."""
    return parse_timestamp(value, "timestamp").isoformat()
