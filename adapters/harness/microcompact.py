"""Microcompact (S7.1) and the context ladder (S7.2) over message histories.

A history's messages are dicts or the SDKs' own objects; the returned history
is plain dicts, as `gate_messages` returns it (see `messages`).

Sizes are the counter's units applied to the history's canonical JSON text
(`ensure_ascii=False`, sorted keys, no spaces). The default counter is the
externalizer policy's token counter, or `len` (characters) without one.

A cleared result keeps its id, position and `is_error` flag; its content
becomes a one-line placeholder naming the artifact that holds the full
output. Whether a result is stored is looked up by its tool_use_id in the
session's artifact records, never by reading the text. A placeholder holds
the handle and the calls that read it back, no text of the output (not even
its summary), so secret redaction (S1.7) has nothing to mask in it.
"""

from __future__ import annotations

import json
import logging
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spillvault.adapters.harness.messages import (
    check_format,
    gate_results,
    iter_tool_results,
    replace_tool_results,
    text_of,
)
from spillvault.adapters.harness.sdk_objects import plain_history
from spillvault.adapters.services.lease_projection import session_projection
from spillvault.domain.bounds import MAX_SIZE, integer_problem
from spillvault.domain.errors import SpillPolicyError
from spillvault.domain.machines import ARTIFACT_MACHINE
from spillvault.domain.notice import SUGGESTED_READ_LIMIT, call_argument

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from spillvault.adapters.harness.messages import Message, Position, ToolResult
    from spillvault.adapters.services.externalizer import (
        Content,
        SessionExternalizer,
    )

logger = logging.getLogger("spillvault")

SizeCounter = Callable[[str], int]
PLACEHOLDER = (
    "[tool result cleared to save context; full output: {handle}; read: "
    "read_artifact(handle={argument}, start_line=1, limit={limit}); search: "
    'grep_artifact(handle={argument}, pattern="...")]'
)
# A placeholder may point only at a stored artifact: an open one's bytes are
# still to come.
_STORED = ARTIFACT_MACHINE.tagged("stored")


@dataclass(frozen=True)
class MicrocompactReport:
    """What one microcompact run measured, cleared, stored and skipped."""

    triggered: bool
    size_before: int
    size_after: int
    cleared: tuple[str, ...] = ()
    stored: tuple[str, ...] = ()
    skipped: Mapping[str, int] = field(default_factory=dict)

    @property
    def freed(self) -> int:
        """Return the units the run saved."""
        return self.size_before - self.size_after

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready form."""
        return {
            "triggered": self.triggered,
            "size_before": self.size_before,
            "size_after": self.size_after,
            "freed": self.freed,
            "cleared": list(self.cleared),
            "stored": list(self.stored),
            "skipped": dict(self.skipped),
        }


@dataclass(frozen=True, kw_only=True)
class ContextPolicy:
    """Thresholds of the context ladder, in the counter's units."""

    trigger: int
    clear_at_least: int
    full_compaction_at: int
    keep_recent: int = 3
    exclude_tools: tuple[str, ...] = ()
    counter: SizeCounter | None = None

    def __post_init__(self) -> None:
        for name in ("trigger", "clear_at_least", "full_compaction_at", "keep_recent"):
            _check_amount(name, getattr(self, name))
        tools = tuple(self.exclude_tools)
        if not all(isinstance(tool, str) for tool in tools):
            msg = "exclude_tools must hold tool names (strings)"
            raise TypeError(msg)
        object.__setattr__(self, "exclude_tools", tools)


@dataclass(frozen=True)
class ContextReport:
    """What the ladder did: gate outcomes, the microcompact run, what is left."""

    size_before: int
    size_after: int
    gated: tuple[tuple[str, str], ...]
    microcompact: MicrocompactReport
    needs_full_compaction: bool

    @property
    def spilled(self) -> tuple[str, ...]:
        """Return the tool_use_ids the gate spilled in this run."""
        return tuple(
            tool_use_id for tool_use_id, reason in self.gated if reason == "spilled"
        )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready form."""
        return {
            "size_before": self.size_before,
            "size_after": self.size_after,
            "gated": [list(pair) for pair in self.gated],
            "spilled": list(self.spilled),
            "microcompact": self.microcompact.to_dict(),
            "needs_full_compaction": self.needs_full_compaction,
        }


def canonical_json(value: object) -> str:
    """Return the JSON text sizes are measured on."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def history_size(messages: Sequence[Mapping[str, Any]], counter: SizeCounter) -> int:
    """Return the size of a history in `counter`'s units."""
    return counter(canonical_json(list(messages)))


def placeholder_for(handle: str) -> str:
    """Return the text a cleared result's content becomes."""
    return PLACEHOLDER.format(
        handle=handle, argument=call_argument(handle), limit=SUGGESTED_READ_LIMIT
    )


def microcompact(  # noqa: PLR0913 - SPEC's signature
    messages: Sequence[object],
    *,
    format: str,  # noqa: A002 - SPEC's keyword
    keep_recent: int,
    trigger: int,
    clear_at_least: int,
    exclude_tools: Iterable[str] = (),
    counter: SizeCounter | None = None,
    externalizer: SessionExternalizer | None = None,
) -> tuple[list[Message], MicrocompactReport]:
    """Clear old tool results, oldest first, when the history is over `trigger`.

    Clearing goes on until `clear_at_least` is freed and the history is back
    within `trigger` (so a second run finds nothing to do), or no candidate is
    left. Never cleared: the newest `keep_recent` results, `exclude_tools`,
    results with a non-text block, results already cleared, and results with
    no stored artifact when there is no `externalizer` to store them.
    """
    fmt = check_format(format)
    for name, amount in (
        ("keep_recent", keep_recent),
        ("trigger", trigger),
        ("clear_at_least", clear_at_least),
    ):
        _check_amount(name, amount)
    count = counter or _default_counter(externalizer)
    history = plain_history(messages, fmt=fmt)
    results = list(iter_tool_results(history, format=fmt))
    size_before = history_size(history, count)
    if size_before <= trigger:
        return history, MicrocompactReport(
            triggered=False, size_before=size_before, size_after=size_before
        )
    run = _Run(history, count, externalizer, frozenset(exclude_tools), size_before)
    recent = min(keep_recent, len(results))
    if recent:
        run.skipped["kept_recent"] = recent
    for result in results[: len(results) - recent]:
        if run.done(trigger, clear_at_least):
            break
        run.clear(result)
    new_messages = replace_tool_results(history, run.replacements)
    return new_messages, MicrocompactReport(
        triggered=True,
        size_before=size_before,
        size_after=history_size(new_messages, count),
        cleared=tuple(run.cleared),
        stored=tuple(run.stored),
        skipped=dict(run.skipped),
    )


def prepare_context(
    messages: Sequence[object],
    *,
    format: str,  # noqa: A002 - SPEC's keyword
    externalizer: SessionExternalizer,
    policy: ContextPolicy,
) -> tuple[list[Message], ContextReport]:
    """Run the ladder (S7.2): gate new results, microcompact, report what is left.

    A result is new when no artifact records its tool_use_id; the others were
    gated (and spilled) or cleared before. Full compaction is the caller's:
    the report asks for it when the history is still over `full_compaction_at`.
    """
    fmt = check_format(format)
    count = policy.counter or _default_counter(externalizer)
    history = plain_history(messages, fmt=fmt)
    size_before = history_size(history, count)
    seen = frozenset(_records_by_id(externalizer))
    gated, outcomes = gate_results(
        history, format=fmt, externalizer=externalizer, arm="model", skip=seen
    )
    compacted, report = microcompact(
        gated,
        format=fmt,
        keep_recent=policy.keep_recent,
        trigger=policy.trigger,
        clear_at_least=policy.clear_at_least,
        exclude_tools=policy.exclude_tools,
        counter=count,
        externalizer=externalizer,
    )
    size_after = report.size_after if report.triggered else history_size(gated, count)
    return compacted, ContextReport(
        size_before=size_before,
        size_after=size_after,
        gated=tuple((tool_use_id, o.reason) for tool_use_id, o in outcomes),
        microcompact=report,
        needs_full_compaction=size_after > policy.full_compaction_at,
    )


class _Run:
    """The state of one microcompact run over its candidates, oldest first."""

    def __init__(
        self,
        messages: Sequence[Mapping[str, Any]],
        counter: SizeCounter,
        externalizer: SessionExternalizer | None,
        exclude: frozenset[str],
        size: int,
    ) -> None:
        self._messages = messages
        self._counter = counter
        self._externalizer = externalizer
        self._exclude = exclude
        self._records = _records_by_id(externalizer)
        self._size = size
        self.freed = 0
        self.replacements: dict[Position, Content] = {}
        self.cleared: list[str] = []
        self.stored: list[str] = []
        self.skipped: Tally[str] = Tally()

    def done(self, trigger: int, clear_at_least: int) -> bool:
        """Say whether enough is freed and the history is within `trigger`."""
        if self.freed < clear_at_least or self._size - self.freed > trigger:
            return False
        # Per-result savings are exact for `len` but may drift for a token
        # counter; measuring the whole history keeps a second run a no-op.
        rebuilt = replace_tool_results(self._messages, self.replacements)
        self._size = history_size(rebuilt, self._counter) + self.freed
        return self._size - self.freed <= trigger

    def clear(self, result: ToolResult) -> None:
        """Clear one candidate, or count why it was skipped."""
        reason = self._try_clear(result)
        if reason is not None:
            self.skipped[reason] += 1

    def _try_clear(self, result: ToolResult) -> str | None:  # noqa: PLR0911 - one return per skip reason
        if result.tool_name in self._exclude:
            return "excluded"
        text = text_of(result.content)
        if text is None:
            return "non_text"
        handles = self._records.get(result.tool_use_id)
        handle = handles[0] if handles else None
        if handle is not None and text == placeholder_for(handle):
            return "already_cleared"
        if handles == []:
            # Recorded but not stored (still open, quarantined, deleted or
            # lost): the content may be a preview whose original is gone, so
            # storing it now would pass off a preview as the full output.
            return "artifact_unavailable"
        if handle is None and self._externalizer is None:
            return "not_stored"
        worst = handle or self._longest_handle()
        if self._saving(result.content, worst) <= 0:
            return "too_small"
        if handle is None:
            handle = self._store(result, text)
            if handle is None:
                return "store_failed"
        self.replacements[result.position] = _placeholder_content(
            result.content, handle
        )
        self.freed += self._saving(result.content, handle)
        self.cleared.append(result.tool_use_id)
        return None

    def _longest_handle(self) -> str:
        assert self._externalizer is not None  # noqa: S101 - checked by the caller
        return self._externalizer.store.longest_handle()

    def _saving(self, content: Content, handle: str) -> int:
        new = _placeholder_content(content, handle)
        return self._counter(canonical_json(content)) - self._counter(
            canonical_json(new)
        )

    def _store(self, result: ToolResult, text: str) -> str | None:
        externalizer = self._externalizer
        assert externalizer is not None  # noqa: S101 - checked by the caller
        try:
            artifact = externalizer.store.store(
                [text.encode("utf-8")],
                source_tool=result.tool_name,
                tool_use_id=result.tool_use_id,
                is_error=result.is_error,
            )
        except Exception as error:  # noqa: BLE001 - a failed store only skips this result
            logger.warning(
                "spillvault: storing %s for microcompact failed (%s: %s); kept it",
                result.tool_use_id,
                type(error).__name__,
                error,
            )
            return None
        handle = externalizer.store.handle_for(artifact.filename)
        self._records[result.tool_use_id] = [handle]
        self.stored.append(result.tool_use_id)
        return handle


def _records_by_id(
    externalizer: SessionExternalizer | None,
) -> dict[str, list[str]]:
    """Map each recorded tool_use_id to the handles of its stored artifacts.

    The handles are in creation order; an empty list means the id was recorded
    but none of its artifacts is stored.
    """
    if externalizer is None:
        return {}
    records = session_projection(externalizer.session).artifact_records()
    found: dict[str, list[str]] = {}
    for filename, record in records.items():
        if record.tool_use_id is None:
            continue
        handles = found.setdefault(record.tool_use_id, [])
        if record.state in _STORED:
            handles.append(externalizer.store.handle_for(filename))
    return found


def _placeholder_content(content: Content, handle: str) -> Content:
    """Return the placeholder in the content's own shape (string or one block)."""
    text = placeholder_for(handle)
    if isinstance(content, str):
        return text
    # Keeps the first block's other keys (a cache_control marker, say).
    first = dict(content[0]) if content else {}
    first.update(type="text", text=text)
    return [first]


def _default_counter(externalizer: SessionExternalizer | None) -> SizeCounter:
    if externalizer is None:
        return len
    return externalizer.policy.token_counter


def _check_amount(name: str, amount: object) -> None:
    # SpillPolicyError: the class of invalid configuration (a ValueError, as before).
    problem = integer_problem(name, amount, 0, MAX_SIZE)
    if problem is not None:
        raise SpillPolicyError(problem)


__all__ = [
    "PLACEHOLDER",
    "ContextPolicy",
    "ContextReport",
    "MicrocompactReport",
    "SizeCounter",
    "canonical_json",
    "history_size",
    "microcompact",
    "placeholder_for",
    "prepare_context",
]
