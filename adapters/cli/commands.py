"""Handlers of `spillvault run / read / grep / ls` (S1, S3, S3.5)."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from spillvault.adapters.cli.policy_file import load_policy_file
from spillvault.adapters.cli.run import CommandRun
from spillvault.adapters.harness.capping import cap_lines
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.layout import TOOL_RESULTS_DIR
from spillvault.domain.errors import ArtifactAccessError, ArtifactSessionReadOnlyError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator

    from spillvault.adapters.services.externalizer import GateOutcome
    from spillvault.adapters.session import Session, ToolResultExternalizer
    from spillvault.domain.policy import SpillPolicy

SESSION_ENV = "SPILLVAULT_SESSION"
DEFAULT_SESSION = os.path.join(".spillvault", "session")
_MAX_LINE = 2000


def session_dir(
    args: argparse.Namespace, handle: str | None = None, *, create: bool = False
) -> str:
    """Pick the session: --session, then the handle's own session, then the default.

    Only `create` (for `run`) makes the default session's parent directory.
    """
    if args.session:
        return str(args.session)
    if handle is not None:
        results = os.path.dirname(handle)
        if os.path.isabs(handle) and os.path.basename(results) == TOOL_RESULTS_DIR:
            return os.path.dirname(results)
        msg = f"{handle!r} names no session's artifact; pass --session DIR"
        raise ArtifactAccessError(msg)
    chosen = os.environ.get(SESSION_ENV) or DEFAULT_SESSION
    if create:
        parent = os.path.dirname(os.path.abspath(chosen))
        os.makedirs(parent, mode=0o700, exist_ok=True)
    return chosen


def open_existing(args: argparse.Namespace, handle: str | None = None) -> Session:
    """Open an existing session for a command that writes (never create one)."""
    return open_session(session_dir(args, handle), mode="open")


def open_for_reading(args: argparse.Namespace, handle: str | None = None) -> Session:
    """Open an existing session to read it; a read-only one opens as a view.

    A writable session is opened as usual (its recovery pass runs and a short
    journal is caught up); only one we may not write falls back to the view.
    """
    path = session_dir(args, handle)
    try:
        return open_session(path, mode="open")
    except ArtifactSessionReadOnlyError:
        return open_session(path, mode="read")


def _emit(args: argparse.Namespace, text: str, data: dict[str, Any]) -> None:
    if args.json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, sort_keys=True) + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def _outcome_dict(outcome: GateOutcome) -> dict[str, Any]:
    artifact = outcome.artifact
    return {
        "reason": outcome.reason,
        "content": outcome.content,
        "artifact": None
        if artifact is None
        else {
            "handle": artifact.handle,
            "source_id": artifact.source.source_id,
            "content_sha256": artifact.content_sha256,
            "size_bytes": artifact.size_bytes,
            "summary": artifact.summary,
        },
    }


def run_command(args: argparse.Namespace) -> int:
    """Run a command, gate its merged output, print what the model would see."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        msg = "run needs a command after --"
        raise ValueError(msg)
    policy: SpillPolicy | None = None
    if args.policy:
        policy = load_policy_file(args.policy)
    tee = sys.stderr.buffer if _tee_wanted(args) else None
    with open_session(session_dir(args, create=True), policy=policy) as session:
        ext = session.externalizer
        limit = ext.policy.limit_for(args.tool)
        threshold = limit.limit * (1 if limit.unit == "bytes" else 4)
        with CommandRun(command, timeout=args.timeout, tee=tee) as run:
            outcome = _gate_output(
                ext, args.tool, run.chunks(), threshold, lambda: run.interrupted
            )
            code = run.wait()
    data = {**_outcome_dict(outcome), "exit_code": code}
    if run.signalled is not None:
        data["signal"] = signal.Signals(run.signalled).name
    data["timed_out"] = run.timed_out
    _emit(args, str(outcome.content), data)
    return code


def _tee_wanted(args: argparse.Namespace) -> bool:
    """Copy output to stderr live: --tee, --no-tee, else when stdout is a terminal."""
    if args.tee is not None:
        return bool(args.tee)
    return sys.stdout.isatty()


def _gate_output(
    ext: ToolResultExternalizer,
    tool: str,
    chunks: Iterator[bytes],
    threshold: int,
    interrupted: Callable[[], bool],
) -> GateOutcome:
    """Gate a whole short text output; stream a long, binary or cut-short one."""
    buffered = bytearray()
    for data in chunks:
        buffered += data
        if len(buffered) > threshold:
            break
    else:
        if not interrupted():
            try:
                text = buffered.decode("utf-8")
            except UnicodeDecodeError:
                pass  # not text: store the bytes verbatim through a stream
            else:
                return ext.process(text, tool)
    stream = ext.open_stream(tool)
    stream.write(bytes(buffered))
    for data in chunks:
        stream.write(data)
    return stream.close(interrupted=interrupted())


def read_command(args: argparse.Namespace) -> int:
    """Print verified lines (1-based --line) or bytes of an artifact, capped."""
    with open_for_reading(args, args.handle) as session:
        ext = session.externalizer
        if args.bytes:
            start, end = args.bytes  # parsed and bounded by the flag's type
            data = ext.read_artifact_bytes(args.handle, start, end)
            budget = ext.policy.limit_for("read_artifact").budget
            shown = data[:budget]
            text = shown.decode("utf-8", "replace")
            more = None if len(shown) == len(data) else start + len(shown)
            if more is not None:
                text += f"\n[cut: continue with --bytes {more}:{end}]"
            _emit(args, text, {"bytes": text, "next_byte": more})
            return 0
        if args.line < 1:
            msg = "--line is 1-based: it must be >= 1"
            raise ValueError(msg)
        body = ext.read_artifact(args.handle, args.line - 1, args.limit)
        lines = body.split("\n") if body else []
        budget = ext.policy.limit_for("read_artifact").budget
        capped = cap_lines(
            lines, first_line=args.line, budget=budget, max_line=min(_MAX_LINE, budget)
        )
        text = capped.text
        if capped.next_start_line is not None:
            more = capped.next_start_line
            text += f"\n[cut at the output budget: continue with --line {more}]"
        _emit(
            args, text, {"text": capped.text, "next_start_line": capped.next_start_line}
        )
    return 0


def grep_command(args: argparse.Namespace) -> int:
    """Print matches with 1-based line numbers; say how to resume when cut."""
    with open_for_reading(args, args.handle) as session:
        result = session.externalizer.grep_artifact(
            args.handle,
            args.pattern,
            context=args.context,
            max_matches=args.max,
            regex=args.regex,
            offset=args.start - 1,
        )
    rows = []
    for match in result.matches:
        first = match.line_number - len(match.before)
        for offset, line in enumerate((*match.before, match.line, *match.after)):
            number = first + offset
            mark = ":" if number == match.line_number else "-"
            rows.append(f"{number}{mark}{line[:_MAX_LINE]}")
    text = "\n".join(rows) if rows else "no match"
    if result.truncated:
        resume = (result.resume_from or 0) + 1
        text += f"\n[stopped at --max {args.max}: continue with --from {resume}]"
    data = {
        "matches": [
            {
                "line_number": m.line_number,
                "line": m.line,
                "before": list(m.before),
                "after": list(m.after),
            }
            for m in result.matches
        ],
        "truncated": result.truncated,
        "resume_from": result.resume_from,
    }
    _emit(args, text, data)
    return 0 if result.matches else 1


def ls_command(args: argparse.Namespace) -> int:
    """List the session's artifacts: name, size, digest prefix, state, summary."""
    with open_for_reading(args) as session:
        ext = session.externalizer
        rows = []
        for artifact in ext.artifacts():
            content = artifact.stored_content
            rows.append(
                {
                    "filename": artifact.filename,
                    "state": artifact.state,
                    "size_bytes": None if content is None else content.size_bytes,
                    "sha256_prefix": None
                    if content is None
                    else content.content_sha256[:12],
                    "summary": artifact.summary,
                    "handle": ext.store.handle_for(artifact.filename),
                }
            )
    lines = [
        f"{r['filename']:<24} {r['state']:<11} {_or_dash(r['size_bytes']):>12} "
        f"{_or_dash(r['sha256_prefix']):<12} {r['summary'] or ''}"
        for r in rows
    ]
    _emit(args, "\n".join(lines) if lines else "no artifacts", {"artifacts": rows})
    return 0


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)
