"""The fixed parts of a spill replacement: header, notice, key-line block (S1.4).

The layout is described in `preview`; this module renders the parts that are
not the output itself and prices their worst case, which `SpillPolicy`
validation needs before any output exists.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from .command import SIGNAL_NAME_MAX, duration_text
from .enums import SizeUnit
from .graphemes import back_off_cluster, clip
from .key_line_groups import Collapsed
from .summary import SUMMARY_LIMIT

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .command import CommandFacts

KEY_LINE_SHOWN_CHARS: Final = 200
COMMAND_SHOWN_CHARS: Final = 200
_CUT_MARK: Final = "..."
MAX_DIGITS: Final = 20  # any count below 2**64
SESSION_NAME_MAX: Final = 255  # NAME_MAX: the session id is one path component
READ_TOOL: Final = "read_artifact"
GREP_TOOL: Final = "grep_artifact"
SUGGESTED_READ_LIMIT: Final = 200
"""The `limit` a notice suggests: a page a model can take in at once."""
_BREAKING: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class NoticeMeasures(Protocol):
    """What pricing the fixed parts needs of a policy: its bounds and its ruler."""

    @property
    def max_handle_length(self) -> int:
        """The longest handle a notice may show, in UTF-8 bytes."""

    @property
    def max_hint_length(self) -> int:
        """The longest hint a notice may show, in UTF-8 bytes."""

    def measure(self, text: str, unit: SizeUnit) -> int:
        """Return the size of `text` in `unit`."""

    def limit_for(self, tool_name: str) -> ToolBudget:
        """Return the limit that applies to `tool_name`."""


class ToolBudget(Protocol):
    """A tool's limit as the fit check reads it."""

    @property
    def unit(self) -> SizeUnit:
        """The unit the budget is in."""

    @property
    def budget(self) -> int:
        """How much of that unit the whole replacement may take."""


@dataclass(frozen=True)
class PreviewSource:
    """What the header and notice say about the stored artifact."""

    source_id: str
    summary: str
    tool_name: str
    content_sha256: str
    handle: str
    hint: str
    # Lines: the number of "\n" plus one when the output is non-empty and does
    # not end with "\n" (used to number the tail when only windows are given).
    total_lines: int
    total_bytes: int
    tool_use_id: str | None = None
    is_error: bool = False
    partial: bool = False
    command: CommandFacts | None = None
    # What recognizers counted over the whole output ("failed", 3), shown in
    # a facts line under the first when the budget has room for it.
    counts: tuple[tuple[str, int], ...] = ()
    # A listing's structural summary (`listing.listing_summary`), shown under
    # the facts when the budget has room for it.
    listing: str | None = None


def _escape(text: str) -> str:
    """Show an identifier on one line, faithfully (control characters escaped)."""
    return _BREAKING.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}",
        text,
    )


def clip_shown(text: str, limit: int) -> str:
    """Return `text` escaped onto one line in at most `limit` chars ("..." if cut)."""
    shown = _escape(text)
    if len(shown) <= limit:
        return shown
    # Cut the text, not its rendering, so an escape shows whole or not at all.
    room, width, cut = limit - len(_CUT_MARK), 0, 0
    for char in text:
        width += len(_escape(char))
        if width > room:
            break
        cut += 1
    return _escape(text[: back_off_cluster(text, cut)]) + _CUT_MARK


def render_header(source: PreviewSource) -> str:
    """Return the provenance header: two lines (three with command facts)."""
    parts = [
        f"[tool result stored as {_escape(source.handle)}",
        f"tool: {_escape(source.tool_name)}",
        f"sha256: {_escape(source.content_sha256)}",
        f"source: {_escape(source.source_id)}",
    ]
    if source.tool_use_id is not None:
        parts.append(f"tool_use_id: {_escape(source.tool_use_id)}")
    if source.is_error:
        parts.append("is_error: true")
    if source.partial:
        parts.append("partial: the stored output is incomplete")
    # The worst case assumes at most SUMMARY_LIMIT characters; hold to it.
    summary = _BREAKING.sub(" ", clip(source.summary, SUMMARY_LIMIT))
    facts = render_facts(source) if source.counts else ""
    if source.listing is not None:
        facts += _BREAKING.sub(" ", source.listing) + "\n"
    header = "; ".join(parts) + f"]\n{facts}[summary: {summary}]\n"
    command = source.command
    if command is None:
        return header
    shown = clip_shown(command.command_line, COMMAND_SHOWN_CHARS)
    return header + _command_part(
        shown, command.exit_status, command.ending, command.duration_ms
    )


def _command_part(
    shown: str, exit_status: int, ending: str | None, duration_ms: int
) -> str:
    """Render the command line; its parts are separate so their widest is priced."""
    status = str(exit_status) if ending is None else f"{exit_status} ({ending})"
    duration = duration_text(duration_ms)
    return f"[command: {shown}; exit: {status}; duration: {duration}]\n"


def render_notice(
    source: PreviewSource,
    omitted_lines: int,
    omitted_units: int,
    unit: SizeUnit,
    *,
    first_line: int | None = None,
) -> str:
    """Return the one notice line (ending in a newline): what is omitted, where."""
    span = None
    if first_line is not None and omitted_lines > 0:
        span = (first_line, first_line + omitted_lines - 1)
    return _notice(source, omitted_lines, omitted_units, unit, span)


def _notice(
    source: PreviewSource,
    omitted_lines: int,
    omitted_units: int,
    unit: SizeUnit,
    span: tuple[int, int] | None,
) -> str:
    """Render the notice; the line span is separate so its widest can be priced."""
    where = "" if span is None else f" (lines {span[0]}-{span[1]})"
    start = 1 if span is None else span[0]
    limit = SUGGESTED_READ_LIMIT if span is None else span[1] - span[0] + 1
    handle = call_argument(source.handle)
    return (
        f"[... {omitted_units} {unit} omitted, {omitted_lines} lines{where}; "
        f"full output: {_escape(source.handle)}; read: {READ_TOOL}(handle={handle}, "
        f"start_line={start}, limit={min(limit, SUGGESTED_READ_LIMIT)}); search: "
        f'{GREP_TOOL}(handle={handle}, pattern="..."); shell: {_escape(source.hint)}]\n'
    )


def call_argument(value: str) -> str:
    """Quote `value` as a string argument a model can copy into a tool call."""
    # JSON quoting (also valid Python) with every line-breaking character
    # escaped, so the call stays on the notice's one line.
    quoted = json.dumps(value, ensure_ascii=False)
    return _BREAKING.sub(lambda m: f"\\u{ord(m[0]):04x}", quoted)


def widest_notice(source: PreviewSource, lines: int, units: int, unit: SizeUnit) -> str:
    """Render the notice with its line span at its widest (`lines`-`lines`)."""
    return _notice(source, lines, units, unit, (lines, lines))


def render_key_lines(
    key_lines: Iterable[tuple[int, str] | Collapsed], handle: str = ""
) -> str:
    """Return the key-line block ("" when there are none).

    The count in its first line is the number of lines that follow: key lines
    and the notes of collapsed groups, whose grep call names `handle`.
    """
    shown = [
        _show_note(entry, handle)
        if isinstance(entry, Collapsed)
        else f"line {entry[0]}: {_show_line(entry[1])}\n"
        for entry in key_lines
    ]
    if not shown:
        return ""
    return f"[key lines from the omitted part: {len(shown)}]\n" + "".join(shown)


def _show_note(note: Collapsed, handle: str) -> str:
    """Render a collapsed group's note: how many more, and the grep that lists them."""
    more = f"at least {note.more}" if note.at_least else str(note.more)
    return (
        f"[... {more} more like line {note.like_line}: {GREP_TOOL}("
        f"handle={call_argument(handle)}, pattern={call_argument(note.pattern)})]\n"
    )


def render_facts(source: PreviewSource) -> str:
    """Return the line of whole-output facts: exit, lines, bytes, what was counted."""
    parts = []
    if source.command is not None:
        parts.append(f"exit {source.command.exit_status}")
    parts.append(_counted(source.total_lines, "line", "lines"))
    parts.append(_counted(source.total_bytes, "byte", "bytes"))
    parts.append(", ".join(f"{n:,} {_escape(name)}" for name, n in source.counts))
    return "[" + " \u00b7 ".join(parts) + "]\n"


def _counted(count: int, one: str, many: str) -> str:
    """Return `1 line`, `2 lines`: a count and its noun."""
    return f"{count:,} {one if count == 1 else many}"


def _show_line(text: str) -> str:
    """Clip a key line for display; it must stay one line."""
    text = text.removesuffix("\r").replace("\n", " ")
    if len(text) <= KEY_LINE_SHOWN_CHARS:
        return text
    return text[: back_off_cluster(text, KEY_LINE_SHOWN_CHARS)] + "..."


def _fill(fill: str, size_bytes: int) -> str:
    """Return a string of exactly `size_bytes` UTF-8 bytes made mostly of `fill`."""
    width = len(fill.encode("utf-8", "surrogatepass"))
    count = size_bytes // width
    return fill * count + "!" * (size_bytes - count * width)


def worst_fixed_size(  # noqa: PLR0913 - the call's facts, all keyword-only
    policy: NoticeMeasures,
    tool_name: str,
    unit: SizeUnit,
    *,
    tool_use_id: str | None = None,
    is_error: bool = False,
    session_id: str | None = None,
    with_command: bool = False,
) -> int:
    """Return the largest header + separator + notice a call can need, in `unit`."""
    # Handles and hints are bounded in rendered UTF-8 bytes, the summary and a
    # command line in characters, every count by MAX_DIGITS digits; without a
    # session id its name may take NAME_MAX bytes. Fills that maximise
    # characters ("!") and bytes (astral) make it exact for chars and bytes (an
    # ASCII signal name is priced a little high in bytes); for tokens it is the
    # largest count over a few fills (exact for the default counter, where "!"
    # is worst).
    fills = ["!", "\U0001f600"]
    if unit == SizeUnit.TOKENS:
        fills += ["a", "0", " ", "\u5b57", "\u0301", "\u00e9"]
    nines = int("9" * MAX_DIGITS)
    hexish = "0a" * 32  # a digest whose every character is a token of its own
    worst = 0
    for fill in fills:
        session = (
            session_id if session_id is not None else _fill(fill, SESSION_NAME_MAX)
        )
        source = PreviewSource(
            source_id=f"artifact:{session}:tool_result_{nines}.txt:{hexish[:12]}",
            summary=fill * SUMMARY_LIMIT,
            tool_name=tool_name,
            content_sha256=hexish,
            handle=_fill(fill, policy.max_handle_length),
            hint=_fill(fill, policy.max_hint_length),
            total_lines=nines,
            total_bytes=nines,
            tool_use_id=tool_use_id,
            is_error=is_error,
            partial=True,
        )
        headers = [render_header(source)]
        if with_command:
            # The command line is the header's last: append its widest forms.
            shown = fill * COMMAND_SHOWN_CHARS
            headers = [
                headers[0] + _command_part(shown, nines, ending, nines)
                for ending in ("timed out", fill * SIGNAL_NAME_MAX)
            ]
        for header in headers:
            for notice_unit in {unit, SizeUnit.BYTES}:
                notice = _notice(source, nines, nines, notice_unit, (nines, nines))
                worst = max(worst, policy.measure(header + "\n" + notice, unit))
    return worst


def fixed_parts_fit(  # noqa: PLR0913 - the call's facts, all keyword-only
    policy: NoticeMeasures,
    tool_name: str,
    *,
    tool_use_id: str | None = None,
    is_error: bool = False,
    session_id: str | None = None,
    with_command: bool = False,
) -> bool:
    """Tell whether the worst-case header and notice fit the tool's budget (S1.2.4)."""
    limit = policy.limit_for(tool_name)
    worst = worst_fixed_size(
        policy,
        tool_name,
        limit.unit,
        tool_use_id=tool_use_id,
        is_error=is_error,
        session_id=session_id,
        with_command=with_command,
    )
    return worst <= limit.budget
