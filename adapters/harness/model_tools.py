"""The page-fault tools a model calls: definitions and a handler (S7.2, S3.5).

`read_artifact` (handle, 1-based `start_line`, `limit`) and `grep_artifact`
(handle, pattern, `context`, `max_matches`, `regex`, 1-based `start_line`)
are described in each wire format; `handle_tool_call` runs them and always
returns text for the model: capped at the read tool's budget, with numbered
lines shown as a terminal would (no escape sequences, overwritten progress
collapsed, as in the preview), secrets masked unless the policy's
`redact_secrets` is off (S3.6), and saying how to continue when cut. Every
failure becomes an `error: …` line naming what to change, never an
exception. Both tools are exempt from the gate on the model arm (S1.2), so
their output is not spilled again.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from spillvault.adapters.harness.capping import cap_lines
from spillvault.adapters.services.reader import (
    RegexTimeoutError,
    regex_matching_lines,
)
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactRetentionError,
)
from spillvault.domain.notice import (
    GREP_TOOL,
    READ_TOOL,
    SUGGESTED_READ_LIMIT,
    call_argument,
)
from spillvault.domain.redaction import Edge, looks_like_block_body
from spillvault.domain.terminal import clean_terminal

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from spillvault.adapters.services.externalizer import SessionExternalizer
    from spillvault.domain.reading import GrepMatch

Format = Literal["anthropic", "openai"]
DEFAULT_READ_LIMIT = SUGGESTED_READ_LIMIT
MAX_READ_LIMIT = 5000
MAX_CONTEXT = 20
DEFAULT_MAX_MATCHES = 50
MAX_MATCHES = 500
MAX_LINE_CHARS = 2000
BLOCK_LOOKBACK = 200
"""Lines read back before a page that may lie inside a private-key block."""

_HANDLE = {
    "type": "string",
    "description": "The artifact handle from a stored tool result's notice.",
}
_START_LINE = {
    "type": "integer",
    "minimum": 1,
    "description": "First line to read, 1-based (line numbers as the preview shows).",
}
_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    READ_TOOL: (
        (
            "Read lines of a stored tool result (verified against its SHA-256). "
            "Use the handle from the result's notice; lines are numbered from 1."
        ),
        {
            "type": "object",
            "properties": {
                "handle": _HANDLE,
                "start_line": {**_START_LINE, "default": 1},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_READ_LIMIT,
                    "default": DEFAULT_READ_LIMIT,
                    "description": "How many lines to read.",
                },
            },
            "required": ["handle"],
            "additionalProperties": False,
        },
    ),
    GREP_TOOL: (
        (
            "Search a stored tool result for a literal string (or a regular "
            "expression with regex=true); returns matching lines, numbered from 1."
        ),
        {
            "type": "object",
            "properties": {
                "handle": _HANDLE,
                "pattern": {"type": "string", "minLength": 1},
                "context": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_CONTEXT,
                    "default": 0,
                    "description": "Lines of context before and after each match.",
                },
                "max_matches": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_MATCHES,
                    "default": DEFAULT_MAX_MATCHES,
                },
                "regex": {"type": "boolean", "default": False},
                "start_line": {**_START_LINE, "default": 1},
            },
            "required": ["handle", "pattern"],
            "additionalProperties": False,
        },
    ),
}


def tool_definitions(format: Format) -> list[dict[str, Any]]:  # noqa: A002 - SPEC's name
    """Return the two tools' definitions in `format` ("anthropic" or "openai")."""
    if format == "anthropic":
        return [
            {"name": name, "description": text, "input_schema": schema}
            for name, (text, schema) in _SCHEMAS.items()
        ]
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {"name": name, "description": text, "parameters": schema},
            }
            for name, (text, schema) in _SCHEMAS.items()
        ]
    msg = f"format must be 'anthropic' or 'openai', not {format!r}"
    raise ValueError(msg)


class _BadCall(Exception):
    """A call the model can fix; the message says how."""


def handle_tool_call(
    externalizer: SessionExternalizer, name: str, arguments: Mapping[str, Any] | str
) -> str:
    """Run a read/grep tool call and return what the model should see."""
    try:
        args = _arguments(arguments)
        if name == READ_TOOL:
            return _read(externalizer, args)
        if name == GREP_TOOL:
            return _grep(externalizer, args)
        msg = f"unknown tool {name!r}; available: {READ_TOOL}, {GREP_TOOL}"
        raise _BadCall(msg)
    except _BadCall as error:
        return f"error: {error}"
    except ArtifactAccessError as error:
        return (
            f"error: unknown or inaccessible handle ({error}); use the exact handle "
            "from a stored tool result's notice"
        )
    except ArtifactIntegrityError as error:
        return (
            f"error: the stored output failed verification ({error}); do not trust it"
        )
    except (ArtifactRetentionError, RegexTimeoutError, ValueError) as error:
        return f"error: {error}"


def _arguments(arguments: Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(arguments, str):  # OpenAI sends the arguments as JSON text
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError as error:
            msg = f"arguments are not valid JSON ({error.msg})"
            raise _BadCall(msg) from None
    if not isinstance(arguments, dict):
        msg = "arguments must be a JSON object"
        raise _BadCall(msg)
    return dict(arguments)


def _integer(args: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{key} must be an integer, not {value!r}"
        raise _BadCall(msg)
    if not low <= value <= high:
        msg = f"{key} must be between {low} and {high}, not {value}"
        raise _BadCall(msg)
    return value


def _text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        msg = f"{key} is required and must be a non-empty string"
        raise _BadCall(msg)
    return value


def _known(args: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(args) - allowed)
    if unknown:
        allowed_names = ", ".join(sorted(allowed))
        msg = f"unknown argument(s) {', '.join(unknown)}; allowed: {allowed_names}"
        raise _BadCall(msg)


def _read(ext: SessionExternalizer, args: dict[str, Any]) -> str:
    _known(args, {"handle", "start_line", "limit"})
    handle = _text(args, "handle")
    start = _integer(args, "start_line", 1, 1, 2**62)
    limit = _integer(args, "limit", DEFAULT_READ_LIMIT, 1, MAX_READ_LIMIT)
    total = ext.line_count(handle)
    if start > max(total, 1):
        msg = f"start_line {start} is past the end: the output has {total} lines"
        raise _BadCall(msg)
    body = ext.read_artifact(handle, start - 1, limit)
    # A final newline ends the last line; it starts no new one (S2.3 counts).
    lines = body.split("\n")[: max(0, min(limit, total - start + 1))]
    # Lines as a terminal shows them, like the preview (the library reads stay exact).
    shown = redact_page(ext, handle, start, [clean_terminal(x) for x in lines], total)
    numbered = [f"{start + i}: {line}" for i, line in enumerate(shown)]
    budget = ext.policy.limit_for(READ_TOOL).budget
    capped = cap_lines(
        numbered, first_line=start, budget=budget, max_line=min(MAX_LINE_CHARS, budget)
    )
    last = start + capped.shown - 1
    header = f"[lines {start}-{last} of {total}]" if capped.shown else f"[0 of {total}]"
    text = header + ("\n" + capped.text if capped.text else "")
    following = capped.next_start_line or (last + 1 if last < total else None)
    if following is not None:
        call = f"handle={call_argument(handle)}, start_line={following}, limit={limit}"
        text += f"\n[more: {READ_TOOL}({call})]"
    return text


def _grep(ext: SessionExternalizer, args: dict[str, Any]) -> str:
    _known(args, {"handle", "pattern", "context", "max_matches", "regex", "start_line"})
    handle = _text(args, "handle")
    pattern = _text(args, "pattern")
    context = _integer(args, "context", 0, 0, MAX_CONTEXT)
    limit = _integer(args, "max_matches", DEFAULT_MAX_MATCHES, 1, MAX_MATCHES)
    start = _integer(args, "start_line", 1, 1, 2**62)
    regex = args.get("regex", False)
    if not isinstance(regex, bool):
        msg = f"regex must be true or false, not {regex!r}"
        raise _BadCall(msg)
    result = ext.grep_artifact(
        handle,
        pattern,
        context=context,
        max_matches=limit,
        regex=regex,
        offset=start - 1,
    )
    total = _recorded_lines(ext, handle)
    shown = masked_matches(
        ext, handle, result.matches, total, pattern=pattern, regex=regex
    )
    numbers: list[int] = []
    rows: list[str] = []
    for match in shown:
        first = match.line_number - len(match.before)
        for i, line in enumerate((*match.before, match.line, *match.after)):
            if total is not None and first + i > total:
                break  # the empty piece after a final newline is no line
            mark = ":" if first + i == match.line_number else "-"
            numbers.append(first + i)
            rows.append(f"{first + i}{mark} {line}")
    if not rows:
        return f"no match for {pattern!r} from line {start}"
    budget = ext.policy.limit_for(READ_TOOL).budget
    capped = cap_lines(
        rows, first_line=1, budget=budget, max_line=min(MAX_LINE_CHARS, budget)
    )
    found = len(shown)
    text = f"[{found} match{'' if found == 1 else 'es'}]\n" + capped.text
    resume = None
    if capped.next_start_line is not None:  # cut at the budget
        resume = numbers[capped.shown - 1] + 1
    elif result.truncated and result.resume_from is not None:
        resume = result.resume_from + 1
    if resume is not None:
        call = _grep_call(handle, pattern, args, resume)
        text += f"\n[more: {GREP_TOOL}({call})]"
    return text


def masked_matches(  # noqa: PLR0913 - one grep call's parts
    ext: SessionExternalizer,
    handle: str,
    matches: Sequence[GrepMatch],
    total: int | None,
    *,
    pattern: str,
    regex: bool,
    clean: bool = True,
) -> list[GrepMatch]:
    """Return the matches as the model sees them: cleaned, secrets masked (S3.6).

    A matched line that held a secret stays a match only if the pattern also
    matches what is shown of it: a grep is no oracle for a masked value.
    `clean=False` keeps terminal escapes (the CLI's own output).
    """
    shown: list[GrepMatch] = []
    changed: list[int] = []  # the matches whose own line a secret was masked in
    for match in matches:
        first = match.line_number - len(match.before)
        window = [*match.before, match.line, *match.after]
        if clean:
            window = [clean_terminal(line) for line in window]
        masked = redact_page(ext, handle, first, window, total)
        cut = len(match.before)
        if masked[cut] != window[cut]:
            changed.append(len(shown))
        shown.append(
            replace(
                match,
                before=tuple(masked[:cut]),
                line=masked[cut],
                after=tuple(masked[cut + 1 :]),
            )
        )
    if regex and changed:
        lines = [shown[i].line for i in changed]
        hits = regex_matching_lines(pattern, lines, ext.reader.regex_timeout)
        dropped = set(changed) - {changed[i] for i in hits}
    else:
        dropped = {i for i in changed if pattern not in shown[i].line}
    return [match for i, match in enumerate(shown) if i not in dropped]


def redact_page(
    ext: SessionExternalizer,
    handle: str,
    first: int,
    lines: list[str],
    total: int | None,
) -> list[str]:
    """Mask secrets in consecutive lines from 1-based `first` (S3.6).

    Unless the policy's `redact_secrets` is off. A page cut from the middle
    of a private-key block holds neither its opener nor its closer: when
    every line could be block body, the lines before it say whether it is.
    """
    if not ext.policy.redact_secrets or not lines:
        return lines
    redactor = ext.redactor
    start = Edge.LINE if first > 1 else Edge.WHOLE
    last = first + len(lines) - 1
    end = Edge.WHOLE if total is not None and last >= total else Edge.LINE
    shown = redactor.redact_lines(lines, start=start, end=end)
    if shown == lines and first > 1 and all(map(looks_like_block_body, lines)):
        back = min(BLOCK_LOOKBACK, first - 1)
        before = ext.read_artifact(handle, first - 1 - back, back)
        if redactor.ends_inside_block(before):
            block = "\n".join(lines)
            mask = redactor.mask("private-key", block)
            shown = [mask if line.strip() else line for line in lines]
    return shown


def _recorded_lines(ext: SessionExternalizer, handle: str) -> int | None:
    """Return the artifact's line count, or None while it is still being written."""
    try:
        return ext.line_count(handle)
    except ArtifactAccessError:
        return None


def _grep_call(handle: str, pattern: str, args: dict[str, Any], resume: int) -> str:
    """Return the arguments that continue a grep: the same search, further on."""
    parts = [f"handle={call_argument(handle)}", f"pattern={call_argument(pattern)}"]
    parts.extend(
        f"{key}={args[key]}" for key in ("context", "max_matches") if key in args
    )
    if args.get("regex"):
        parts.append("regex=true")
    parts.append(f"start_line={resume}")
    return ", ".join(parts)
