"""Deterministic, bounded artifact summaries: never raise, need no model (S2.3)."""

from __future__ import annotations

from .terminal import clean_terminal

SUMMARY_LIMIT = 240
FIRST_LINE_LIMIT = 160


def summarize(first_nonempty_line: str, line_count: int, size_bytes: int) -> str:
    """Return `<first non-empty line, clipped> (<lines> lines, <bytes> bytes)`."""
    line = visible(first_nonempty_line)
    if len(line) > FIRST_LINE_LIMIT:
        line = line[: FIRST_LINE_LIMIT - 1] + "…"
    suffix = f"({line_count} lines, {size_bytes} bytes)"
    text = f"{line} {suffix}" if line else suffix
    return text[:SUMMARY_LIMIT]


def visible(line: str) -> str:
    """Return what a summary shows of a line: as a terminal shows it, printable."""
    shown = clean_terminal(line)
    return "".join(c if c.isprintable() else " " for c in shown).strip()


def check_summary(summary: object) -> str:
    """Return a caller-given summary, or raise ValueError before any file exists."""
    if not isinstance(summary, str) or not summary.strip():
        msg = "summary must be a non-blank string"
        raise ValueError(msg)
    if len(summary) > SUMMARY_LIMIT:
        msg = f"summary must be at most {SUMMARY_LIMIT} characters, not {len(summary)}"
        raise ValueError(msg)
    return summary
