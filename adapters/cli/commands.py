"""Handlers of `spillvault read / grep / ls` (S3, S3.5); `run` is in run_gate."""

from __future__ import annotations

import base64
import shlex
import sys
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

from spillvault.adapters.cli.output import emit
from spillvault.adapters.cli.paging import (
    MAX_LINE,
    byte_page,
    grep_rows,
    line_page,
    stored_content,
    within_lines,
)
from spillvault.adapters.cli.sessions import (
    open_for_reading,
    session_of_handle,
    sessions_to_list,
)
from spillvault.adapters.cli.tables import (
    MISSING,
    Column,
    age_text,
    cell_of,
    human_size,
    render_table,
)
from spillvault.adapters.harness.capping import cap_line
from spillvault.adapters.harness.model_tools import masked_matches
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.notice import clip_shown
from spillvault.domain.redaction import Edge

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping

    from spillvault.adapters.cli.paging import LinePage
    from spillvault.adapters.session import ToolResultExternalizer
    from spillvault.domain.command import CommandFacts

_READ_LIMITS = "read_artifact"
"""The policy's limits that bound what a read prints (as for the model's tool)."""
_COMMAND_CELL_CHARS = 40
_COMMAND_FIELDS = ("command", "exit_status", "signal", "timed_out", "duration_ms")
"""The `ls --json` fields of the command that produced an artifact."""


def read_command(args: argparse.Namespace) -> int:
    """Print verified lines (1-based --line) or bytes of an artifact, capped."""
    raw: bool = args.raw
    with open_for_reading(session_of_handle(args, args.handle)) as session:
        ext = session.externalizer
        budget = ext.policy.limit_for(_READ_LIMITS).budget
        if raw and args.bytes and not args.json:
            start, end = args.bytes  # parsed and bounded by the flag's type
            _write_raw(ext, args.handle, start, end)
        elif args.bytes:
            _emit_byte_page(args, ext, budget, redact=not raw)
        else:
            page = line_page(
                ext, args.handle, args.line, args.limit, budget=budget, redact=not raw
            )
            _emit_line_page(args, page)
    return 0


def _usage_error(args: argparse.Namespace, message: str) -> NoReturn:
    """Fail as argparse does for a bad flag: usage, the message, exit status 2."""
    error: Callable[[str], NoReturn] = args.usage_error
    error(message)


def _write_raw(ext: ToolResultExternalizer, handle: str, start: int, end: int) -> None:
    """Write verified bytes `[start, end)` to stdout exactly, a chunk at a time."""
    sys.stdout.flush()
    out = sys.stdout.buffer
    position = start
    while position < end:
        data = ext.read_artifact_bytes(
            handle, position, min(end, position + CHUNK_SIZE)
        )
        if not data:
            break  # the end of the artifact
        out.write(data)
        position += len(data)
    out.flush()


def _emit_byte_page(
    args: argparse.Namespace,
    ext: ToolResultExternalizer,
    budget: int,
    *,
    redact: bool,
) -> None:
    """Print a page of bytes cut on characters: as text, or base64 under --json.

    Secrets are masked (S3.6) unless `redact` is False or the policy says so;
    the offsets stay the artifact's.
    """
    start, end = args.bytes  # parsed and bounded by the flag's type
    page = byte_page(
        partial(ext.read_artifact_bytes, args.handle), start, end, budget=budget
    )
    content = stored_content(ext, args.handle)
    size = None if content is None else content.size_bytes
    rows = []
    if page.start != page.requested_start:
        rows.append(
            f"[from byte {page.start}: byte {page.requested_start} is inside "
            "the character that starts there]"
        )
    data_bytes = page.data
    if page.data and redact and ext.policy.redact_secrets:
        text = page.data.decode("utf-8", "replace")
        start_edge, end_edge = _page_edges(ext, args.handle, page.start, page.end, size)
        shown = ext.redactor.redact(text, start=start_edge, end=end_edge)
        data_bytes = shown.encode("utf-8", "surrogatepass")
    if data_bytes:
        rows.append(data_bytes.decode("utf-8", "replace"))
    if page.next_byte is not None:
        # The rest of the range asked for, else a page as wide as the one asked.
        width = end - start or budget
        following = end if page.next_byte < end else page.next_byte + width
        if size is not None:
            following = min(following, size)
        rows.append(f"[next: --bytes {page.next_byte}:{following}]")
    elif not page.data:
        rows.append(f"[end of the artifact: no bytes from byte {page.start}]")
    data = {
        "bytes_base64": base64.b64encode(data_bytes).decode("ascii"),
        "start": page.start,
        "requested_start": page.requested_start,
        "end": page.end,
        "size_bytes": size,
        "next_byte": page.next_byte,
    }
    emit(args, "\n".join(rows), data)


def _page_edges(
    ext: ToolResultExternalizer, handle: str, start: int, end: int, size: int | None
) -> tuple[Edge, Edge]:
    """Say what each end of a byte page is: the artifact's, a line's, or mid-line."""
    before = ext.read_artifact_bytes(handle, start - 1, start) if start else b""
    after = ext.read_artifact_bytes(handle, end, end + 1)
    first = Edge.WHOLE if start == 0 else Edge.LINE if before == b"\n" else Edge.MID
    if size is not None and end >= size:
        return first, Edge.WHOLE
    return first, Edge.LINE if after == b"\n" else Edge.MID


def _emit_line_page(args: argparse.Namespace, page: LinePage) -> None:
    """Print a page of lines, and how to go on unless it reached the end."""
    rows = [page.text] if page.lines else []
    if page.next_start_line is not None:
        why = " (cut at the output budget)" if page.cut_at_budget else ""
        rows.append(f"[more: --line {page.next_start_line} --limit {args.limit}]{why}")
    elif not page.lines:
        total = page.total_lines
        rows.append(
            f"[no line {page.start_line}: the artifact has {total} lines]"
            if total is not None
            else f"[no line {page.start_line} yet: the artifact is being written]"
        )
    data = {
        "text": page.text,
        "start_line": page.start_line,
        "lines": page.lines,
        "total_lines": page.total_lines,
        "eof": page.next_start_line is None,
        "next_start_line": page.next_start_line,
    }
    emit(args, "\n".join(rows), data)


def grep_command(args: argparse.Namespace) -> int:
    """Print matches as GNU grep -n does; say how to resume (1-based) when cut."""
    with open_for_reading(session_of_handle(args, args.handle)) as session:
        ext = session.externalizer
        result = ext.grep_artifact(
            args.handle,
            args.pattern,
            context=args.context or 0,
            max_matches=args.max,
            regex=args.regex,
            offset=args.start - 1,
        )
        content = stored_content(ext, args.handle)
        total = None if content is None else content.line_count
        result = within_lines(result, total)
        if not args.raw:
            shown = masked_matches(
                ext,
                args.handle,
                result.matches,
                total,
                pattern=args.pattern,
                regex=args.regex,
                clean=False,
            )
            result = replace(result, matches=tuple(shown))
    rows = grep_rows(result.matches, separators=args.context is not None)
    text = "\n".join(rows) if rows else "no match"
    # `resume_from` (0-based) stays for compatibility; `next_start_line` is the
    # 1-based line where the next match is: the value of --from that continues.
    resume = result.next_start_line if result.truncated else None
    if resume is not None:
        text += f"\n[stopped at --max {args.max}: continue with --from {resume}]"
    data = {
        "matches": [
            {
                "line_number": m.line_number,
                "line": cap_line(m.line, MAX_LINE),
                "before": [cap_line(line, MAX_LINE) for line in m.before],
                "after": [cap_line(line, MAX_LINE) for line in m.after],
            }
            for m in result.matches
        ],
        "truncated": result.truncated,
        "resume_from": result.resume_from,
        "next_start_line": resume,
    }
    emit(args, text, data)
    return 0 if result.matches else 1


def ls_command(args: argparse.Namespace, *, now: datetime | None = None) -> int:
    """List artifacts as one table (or JSON rows), ages as of `now` or the clock."""
    rows: list[dict[str, Any]] = []
    for path in sessions_to_list(args):
        with open_for_reading(path) as session:
            if now is None:
                now = session.clock.now()
            rows.extend(_listing_rows(session.externalizer))
    if getattr(args, "quiet", False):
        text = "\n".join(row["handle"] for row in rows)
    else:
        table = render_table(_ls_columns(now), rows)
        text = "\n".join(table) if rows else "no artifacts"
    emit(args, text, {"artifacts": rows})
    return 0


def _ls_columns(now: datetime | None) -> list[Column]:
    """Return the columns of the `ls` table; a new column is one more entry."""
    return [
        Column("HANDLE", cell_of("handle")),
        Column("SIZE", cell_of("size_bytes", human_size), right=True),
        Column("LINES", cell_of("line_count"), right=True),
        Column("AGE", partial(_age_cell, now), right=True),
        Column("TOOL", cell_of("source_tool")),
        Column("STATE", cell_of("state")),
        Column("EXIT", _exit_cell),
        Column("COMMAND", cell_of("command", _command_cell)),
    ]


def _exit_cell(row: Mapping[str, Any]) -> str:
    """Show a command's exit status and what ended it: `143 SIGTERM`, `124 timeout`."""
    status = row["exit_status"]
    if status is None:
        return MISSING
    if row["timed_out"]:
        return f"{status} timeout"
    return str(status) if row["signal"] is None else f"{status} {row['signal']}"


def _command_cell(argv: list[str]) -> str:
    """Show a command line on one line, clipped to a column's width."""
    return clip_shown(shlex.join(argv), _COMMAND_CELL_CHARS)


def _age_cell(now: datetime | None, row: Mapping[str, Any]) -> str:
    """Show how long before `now` the artifact was created."""
    if now is None:
        return MISSING
    created = datetime.fromisoformat(row["created_at"])
    return age_text((now - created).total_seconds())


def _listing_rows(ext: ToolResultExternalizer) -> list[dict[str, Any]]:
    """Return one `ls` row per artifact of a session: its machine fields."""
    rows = []
    for artifact in ext.artifacts():
        content = artifact.stored_content
        command = artifact.command_facts
        rows.append(
            {
                "handle": ext.store.handle_for(artifact.filename),
                "filename": artifact.filename,
                "state": artifact.state,
                "size_bytes": None if content is None else content.size_bytes,
                "line_count": None if content is None else content.line_count,
                "sha256_prefix": None
                if content is None
                else content.content_sha256[:12],
                "created_at": artifact.created_at,
                "source_tool": artifact.source_tool,
                "summary": artifact.summary,
                **_command_fields(command),
            }
        )
    return rows


def _command_fields(command: CommandFacts | None) -> dict[str, Any]:
    """Return an `ls` row's command fields: all None for output of no command."""
    if command is None:
        return dict.fromkeys(_COMMAND_FIELDS)
    return {
        "command": list(command.argv),
        "exit_status": command.exit_status,
        "signal": command.signal,
        "timed_out": command.timed_out,
        "duration_ms": command.duration_ms,
    }
