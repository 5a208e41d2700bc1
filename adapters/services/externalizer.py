"""The spill gate (S1) and the seed-compatible externalizer facade (Public API).

`process()` is what a harness calls on every finalized tool result: first match
wins — non-text, exempt tool (model arm), under the limit, notice too large,
store failed, spilled. A successful tool call never becomes an error.

Raw bytes are gated too. Bytes that `domain.binary` calls binary are stored
whatever their size, tool or arm (a model can use none of them in context,
and only the artifact keeps them), and the model sees their header, one
description line and the notice: reason `binary`; `notice_too_large` and
`store_failed` then give the description line alone, as nothing is stored.
Other bytes are stored verbatim but gated as their text (decoded with
U+FFFD for invalid bytes), which is also what an untouched outcome returns.

A stream is stored before it is gated, so its handle is always shown: binary
bytes are described (`binary`), an output under its limit is shown whole under
its header and notice (`under_limit`) when that still fits the limit, and any
other output is previewed (`spilled`); a stream cut short keeps `interrupted`
or `store_failed` whatever it shows.
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from spillvault.adapters.services import gc
from spillvault.adapters.services.reader import ArtifactReader
from spillvault.adapters.services.recovery import artifact_filenames
from spillvault.domain.binary import (
    SNIFF_BYTES,
    describe_binary,
    is_binary,
    summarize_binary,
)
from spillvault.domain.enums import ArtifactState, SizeUnit
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactRetentionError,
    SpillPolicyError,
)
from spillvault.domain.key_lines import (
    KEY_LINE_SCAN_CHARS,
    KeyLineScan,
    KeyLineScanner,
)
from spillvault.domain.listing import ListingCounter
from spillvault.domain.notice import PreviewSource, fixed_parts_fit
from spillvault.domain.policy import SpillPolicy
from spillvault.domain.preview import (
    LINE_END_WINDOW,
    PreviewText,
    build_pointer,
    build_preview,
    build_whole,
)
from spillvault.domain.redaction import Edge, Redactor
from spillvault.domain.summary import check_summary, summarize, visible
from spillvault.domain.values import ArtifactCleanupPolicy

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator
    from datetime import datetime

    from spillvault.adapters.services.retention_journal import SessionRetentionJournal
    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.domain.artifact import Artifact
    from spillvault.domain.cleanup import ArtifactCleanupPlan, ArtifactCleanupReport
    from spillvault.domain.command import CommandFacts
    from spillvault.domain.ports import ArtifactStore, ArtifactStream
    from spillvault.domain.reading import GrepResult
    from spillvault.domain.values import ArtifactReference, ArtifactRetentionClaim

logger = logging.getLogger("spillvault")

Arm = Literal["model", "log"]
Content = str | list[dict[str, Any]]
ToolOutput = Content | bytes | bytearray | memoryview
"""What `process` gates: a string, a list of content blocks, or raw bytes."""
_ARMS = ("model", "log")
_PIECE = 1 << 20
# A window of this many bytes per budget unit always holds a budget's worth of
# text: UTF-8 needs at most 4 bytes a code point, and the default token
# counter gives a token for at most 8 ASCII letters (9 with a separator).
_WINDOW_BYTES_PER_UNIT = {SizeUnit.CHARS: 4, SizeUnit.BYTES: 1, SizeUnit.TOKENS: 9}
# Characters a preview may show per budget unit (a token is at most 9); the
# redacted head and tail of a whole text reach twice that, and past any cut.
_CHARS_PER_UNIT = {SizeUnit.CHARS: 1, SizeUnit.BYTES: 1, SizeUnit.TOKENS: 9}
# Mask tags are keyed per session from a secret of this process: stable for a
# session while the process lives, and no oracle to anyone without the key.
_PROCESS_KEY = secrets.token_bytes(32)
_SUMMARY_CUT = "\u2026 ("  # summarize() marks a clipped first line with an ellipsis


@dataclass(frozen=True)
class GateOutcome:
    """What the gate did: the content to use, why, and the artifact if stored."""

    content: Content
    reason: str
    artifact: ArtifactReference | None = None


@dataclass(frozen=True)
class ExternalizedToolResult:
    """The seed's result: the text for the context and the stored artifact."""

    context_text: str
    artifact: ArtifactReference


class SessionExternalizer:
    """Spills oversized tool results to verified artifacts and reads them back."""

    def __init__(
        self,
        session: SessionHandles,
        store: ArtifactStore,
        *,
        policy: SpillPolicy | None = None,
        owns_session: bool = False,
    ) -> None:
        self._owns_session = owns_session
        self.session = session
        self.store = store
        self.policy = self._fit_to_backend(
            policy or self.session.policy or SpillPolicy()
        )
        self.reader = ArtifactReader(self.session, self.store)
        self._redactor: Redactor | None = None

    # redaction ----------------------------------------------------------------

    @property
    def redactor(self) -> Redactor:
        """Return this session's redactor (its mask tags are keyed per session)."""
        if self._redactor is None:
            session_id = self.session.session_id.encode("utf-8", "surrogatepass")
            key = hmac.new(_PROCESS_KEY, session_id, hashlib.sha256).digest()
            self._redactor = Redactor(key)
        return self._redactor

    def redact_summary(self, summary: str) -> str:
        """Return a recorded summary with its secrets masked (its line may be cut)."""
        cut = summary.rfind(_SUMMARY_CUT)
        if cut < 0:
            return self.redactor.redact(summary)
        head = self.redactor.redact(summary[:cut], end=Edge.MID)
        return head + summary[cut:]

    def _redacted_whole(self, text: str, tool_name: str) -> str | _Windows:
        """Redact what a preview of the whole `text` may show: its two ends.

        The middle is never shown but as key lines (redacted on their own), so
        a long text is redacted only within reach of its ends, and comes back
        as it was when they hold no secret, else as its two redacted windows
        (copying a huge text costs more than the whole preview). A short text,
        or one with terminal noise (the builder rescans that for key lines), is
        redacted whole.
        """
        redactor = self.redactor
        limit = self.policy.limit_for(tool_name)
        reach = 2 * (limit.budget * _CHARS_PER_UNIT[limit.unit] + LINE_END_WINDOW) + 64
        size = len(text)
        if size <= 3 * reach or "\x1b" in text or "\r" in text:
            return redactor.redact(text)
        # Windows that end and start at line boundaries cut no credential.
        head_end = _line_end_near(text, reach)
        tail_start = _line_end_near(text, size - reach)
        raw_head, raw_tail = text[:head_end], text[tail_start:]
        head = redactor.redact(raw_head, end=_edge_before(text, head_end))
        tail = redactor.redact(raw_tail, start=_edge_before(text, tail_start))
        if head is raw_head and tail is raw_tail:
            return text
        if min(len(head), len(tail)) < reach // 2:
            return redactor.redact(text)  # masks ate the ends: leave no raw text near
        return _Windows(head, head_end, tail_start, tail)

    def _redacted_key_lines(
        self, key_lines: tuple[tuple[int, str], ...]
    ) -> tuple[tuple[int, str], ...]:
        """Redact each key line; one cut at the scan length may end mid-line.

        Whole lines are redacted as one text (a mask never adds or removes a
        newline), which costs one probe instead of one per line.
        """
        redact = self.redactor.redact
        whole = [line for _, line in key_lines if len(line) < KEY_LINE_SCAN_CHARS]
        joined = "\n".join(whole)
        if joined.count("\n") == max(len(whole) - 1, 0):
            masked = redact(joined, start=Edge.LINE, end=Edge.LINE)
            if masked is not joined:
                whole = masked.split("\n")
        else:  # a line holding a newline: one at a time
            whole = [redact(line, start=Edge.LINE, end=Edge.LINE) for line in whole]
        shown = iter(whole)
        return tuple(
            (
                number,
                next(shown)
                if len(line) < KEY_LINE_SCAN_CHARS
                else redact(line, start=Edge.LINE, end=Edge.MID),
            )
            for number, line in key_lines
        )

    # the gate -----------------------------------------------------------------

    def process(  # noqa: PLR0913 - S1.2's call facts, all keyword-only
        self,
        content: ToolOutput,
        tool_name: str,
        *,
        arm: Arm = "model",
        tool_use_id: str | None = None,
        is_error: bool = False,
        command: CommandFacts | None = None,
    ) -> GateOutcome:
        """Apply the gate of S1.2 to one finalized tool result (bytes: see the module).

        `command` is what the command that produced it did; a stored result
        keeps it and its header shows it.
        """
        if arm not in _ARMS:
            msg = f"arm must be 'model' or 'log', not {arm!r}"
            raise ValueError(msg)
        call = _Call(tool_name, arm, tool_use_id, is_error, command)
        if isinstance(content, bytes | bytearray | memoryview):
            data = bytes(content)
            if is_binary(data):
                return self._gate_binary(data, call)
            decoded = data.decode("utf-8", "replace")
            return self._gate_text(decoded, decoded, data, call)
        text = _text_of(content)
        if text is None:
            return GateOutcome(content, "non_text")
        return self._gate_text(content, text, text, call)

    def _gate_text(
        self, kept: Content, text: str, payload: str | bytes, call: _Call
    ) -> GateOutcome:
        """S1.2 rules 2-6 for `text`: `payload` is what is stored, `kept` what stays."""
        if call.arm == "model" and self.policy.is_exempt(call.tool_name):
            return GateOutcome(kept, "exempt_tool")
        if not self.should_externalize(text, call.tool_name):
            return GateOutcome(kept, "under_limit")
        if not self._notice_fits(call):
            return GateOutcome(kept, "notice_too_large")
        # Stored bytes that are the text's own UTF-8 are scanned as they are
        # written, so the preview never goes over the whole text again.
        same = isinstance(payload, str) or payload.isascii()
        scanner = self._edge_scanner(call.tool_name) if same else None
        artifact = self._try_store(payload, call, key_line_scanner=scanner)
        if artifact is None:
            return GateOutcome(kept, "store_failed")
        reference = self.store.reference_for(artifact)
        try:
            preview = self._preview_whole(
                text,
                artifact,
                reference,
                scanner,
                redact=call.arm == "model" and self.policy.redact_secrets,
            )
        except ValueError as error:
            # Only a handle or hint beyond the declared maxima gets here; the
            # stored artifact stays for GC and the model keeps the original.
            logger.warning(
                "spillvault: preview of %s failed: %s", reference.handle, error
            )
            return GateOutcome(kept, "store_failed")
        return GateOutcome(_replace(kept, preview), "spilled", reference)

    def _gate_binary(self, data: bytes, call: _Call) -> GateOutcome:
        """Store binary bytes whatever their size and describe them (see the module)."""
        if not self._notice_fits(call):
            return GateOutcome(describe_binary(data, len(data)), "notice_too_large")
        summary = summarize_binary(data, len(data))
        artifact = self._try_store(data, call, summary=summary)
        if artifact is None:
            return GateOutcome(describe_binary(data, len(data)), "store_failed")
        reference = self.store.reference_for(artifact)
        view = self._described(data[:SNIFF_BYTES], self._source(artifact, reference))
        return GateOutcome(view, "binary", reference)

    def _try_store(
        self,
        payload: str | bytes,
        call: _Call,
        *,
        summary: str | None = None,
        key_line_scanner: KeyLineScanner | None = None,
    ) -> Artifact | None:
        """Store `payload`, or log why it failed and return None (S1.2.5)."""
        try:
            return self._store(
                payload,
                call.tool_name,
                tool_use_id=call.tool_use_id,
                is_error=call.is_error,
                command=call.command,
                summary=summary,
                key_line_scanner=key_line_scanner,
            )
        except Exception as error:  # noqa: BLE001 - S1.2.5: any failure keeps the original
            logger.warning(
                "spillvault: storing a %s result failed (%s: %s); kept it in context",
                call.tool_name,
                type(error).__name__,
                error,
            )
            return None

    def _fit_to_backend(self, policy: SpillPolicy) -> SpillPolicy:
        """Raise the handle and hint maxima to what this backend really issues.

        A deep session directory makes longer handles than the declared maxima;
        bounding the worst case by the real ones keeps rule 4 exact. When even
        that cannot fit, the declared policy stays and rule 4 refuses per call.
        """
        longest = self.store.longest_handle()
        handle = len(longest.encode())
        hint = len(self.store.hint(longest).encode())
        if handle <= policy.max_handle_length and hint <= policy.max_hint_length:
            return policy
        try:
            return dataclasses.replace(
                policy,
                max_handle_length=max(handle, policy.max_handle_length),
                max_hint_length=max(hint, policy.max_hint_length),
            )
        except SpillPolicyError:
            return policy

    def _notice_fits(self, call: _Call) -> bool:
        """S1.2 rule 4: the worst-case header and notice of this call fit."""
        longest = self.store.longest_handle()
        policy = self.policy
        if len(longest.encode()) > policy.max_handle_length:
            return False
        if len(self.store.hint(longest).encode()) > policy.max_hint_length:
            return False
        return fixed_parts_fit(
            policy,
            call.tool_name,
            tool_use_id=call.tool_use_id,
            is_error=call.is_error,
            session_id=self.session.session_id,
            with_command=call.command is not None,
        )

    def artifacts(self) -> Iterator[Artifact]:
        """Yield every artifact of the session, in creation order."""
        for filename in artifact_filenames(self.session):
            artifact = self.session.store.get_artifact(filename)
            if artifact is not None:
                yield artifact

    def should_externalize(self, output: str, tool_name: str) -> bool:
        """Say whether `output` is over the tool's limit in the limit's unit."""
        limit = self.policy.limit_for(tool_name)
        return self.policy.measure(output, limit.unit) > limit.limit

    def externalize(
        self, output: str, tool_name: str, *, summary: str | None = None
    ) -> ExternalizedToolResult:
        """Store `output` whatever its size and return its preview (the seed's call)."""
        if summary is not None:
            check_summary(summary)
        artifact = self._store(output, tool_name, summary=summary)
        reference = self.store.reference_for(artifact)
        return ExternalizedToolResult(
            self._pointer(output, artifact, reference), reference
        )

    def summarize(self, output: str, tool_name: str) -> str:  # noqa: ARG002 - seed signature
        """Return the deterministic summary `output` would be stored with."""
        lines = output.split("\n")
        first = next((line for line in lines if visible(line)), "")
        count = len(lines) - (1 if output.endswith("\n") or not output else 0)
        return summarize(first, count, len(output.encode("utf-8", "surrogatepass")))

    def make_pointer(self, output: str, artifact: ArtifactReference) -> str:
        """Return the S1.4 replacement of `output` for a stored artifact."""
        return self._pointer(output, self._artifact_of(artifact), artifact)

    def open_stream(
        self, tool_name: str, *, tool_use_id: str | None = None
    ) -> GateStream:
        """Start a streaming artifact for a command still running (S2.4)."""
        return GateStream(self, tool_name, tool_use_id)

    # page faults ----------------------------------------------------------------

    def read_artifact(
        self,
        artifact: ArtifactReference | str,
        offset: int = 0,
        limit: int = 2000,
        *,
        start_line: int | None = None,
    ) -> str:
        """Return lines [offset, offset+limit) of a verified artifact (S3.1).

        `start_line` is the 1-based alternative to `offset`.
        """
        return self.reader.read_artifact(artifact, offset, limit, start_line=start_line)

    def line_count(self, artifact: ArtifactReference | str) -> int:
        """Return how many lines a stored artifact has (as recorded, S2.3)."""
        handle = artifact if isinstance(artifact, str) else artifact.handle
        filename = self.store.resolve(handle)
        recorded = self.session.store.get_artifact(filename)
        content = None if recorded is None else recorded.stored_content
        if content is None:
            msg = f"{filename} holds no stored output"
            raise ArtifactAccessError(msg)
        return content.line_count

    def read_artifact_bytes(
        self, artifact: ArtifactReference | str, start: int, end: int
    ) -> bytes:
        """Return verified bytes [start, end)."""
        return self.reader.read_artifact_bytes(artifact, start, end)

    def grep_artifact(  # noqa: PLR0913 - SPEC's signature plus the continuation
        self,
        artifact: ArtifactReference | str,
        pattern: str,
        *,
        context: int = 0,
        max_matches: int = 100,
        regex: bool = False,
        offset: int = 0,
        start_line: int | None = None,
    ) -> GrepResult:
        """Search a verified artifact, literally unless `regex` (S3.1).

        `start_line` (1-based) or `offset` (0-based) is where the search
        starts; a truncated result's `next_start_line` continues it.
        """
        return self.reader.grep_artifact(
            artifact,
            pattern,
            context=context,
            max_matches=max_matches,
            regex=regex,
            offset=offset,
            start_line=start_line,
        )

    def read_from_disk(
        self, path: str | os.PathLike[str], offset: int = 0, limit: int = 2000
    ) -> str:
        """Seed-compatible read of an artifact path, confined like S3.2."""
        return self.reader.read_from_disk(path, offset, limit)

    # garbage collection (S6) -------------------------------------------------

    def plan_cleanup_from_journal(
        self,
        journal: SessionRetentionJournal,
        *,
        policy: ArtifactCleanupPolicy | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupPlan:
        """Plan GC against the journal's live leases (S6.1); a dry run by default."""
        return gc.plan_cleanup_from_journal(
            self._same_session(journal), policy=_or_default(policy), now=now
        )

    def apply_cleanup_from_journal(
        self,
        plan: ArtifactCleanupPlan,
        journal: SessionRetentionJournal,
        *,
        now: datetime | None = None,
    ) -> ArtifactCleanupReport:
        """Delete what `plan` planned and is still exactly as planned (S6.2)."""
        return gc.apply_cleanup_from_journal(self._same_session(journal), plan, now=now)

    def cleanup_artifacts_from_journal(
        self,
        journal: SessionRetentionJournal,
        *,
        policy: ArtifactCleanupPolicy | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupReport:
        """Plan, then apply unless the policy is a dry run."""
        plan = self.plan_cleanup_from_journal(journal, policy=policy, now=now)
        return self.apply_cleanup_from_journal(plan, journal, now=now)

    def plan_cleanup(
        self,
        claims: Iterable[ArtifactRetentionClaim] = (),
        *,
        policy: ArtifactCleanupPolicy | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupPlan:
        """Plan GC from raw claims (the seed's way); refused with leases (S6.4)."""
        return gc.plan_cleanup_from_claims(
            self.session, iter(claims), policy=_or_default(policy), now=now
        )

    def apply_cleanup(
        self,
        plan: ArtifactCleanupPlan,
        *,
        claims: Iterable[ArtifactRetentionClaim] | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupReport:
        """Apply a raw-claims plan; refused once leases exist (S6.4)."""
        if claims is None:
            # Applying without the claims of now would re-check against nothing.
            msg = "current retention claims are required to apply a cleanup plan"
            raise ArtifactRetentionError(msg)
        return gc.apply_cleanup_with_claims(self.session, plan, list(claims), now=now)

    def cleanup_artifacts(
        self,
        claims: Iterable[ArtifactRetentionClaim] = (),
        *,
        policy: ArtifactCleanupPolicy | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupReport:
        """Plan from raw claims, then apply unless the policy is a dry run."""
        claims = list(claims)
        plan = self.plan_cleanup(claims, policy=policy, now=now)
        return self.apply_cleanup(plan, claims=claims, now=now)

    def _same_session(self, journal: SessionRetentionJournal) -> SessionHandles:
        if journal.session_id != self.session.session_id:
            msg = "the journal belongs to a different artifact session"
            raise ArtifactRetentionError(msg)
        return journal.session

    def close(self) -> None:
        """Release the artifact directory, and the session if this opened it."""
        self.store.close()
        if self._owns_session:
            self.session.close()

    # internals ------------------------------------------------------------------

    def _artifact_of(self, reference: ArtifactReference) -> Artifact:
        filename = self.store.resolve(reference.handle)
        artifact = self.session.store.get_artifact(filename)
        if artifact is None:
            msg = f"no artifact event for {filename}"
            raise ArtifactAccessError(msg)
        return artifact

    def _store(  # noqa: PLR0913 - the fields S2.3 records
        self,
        payload: str | bytes,
        tool_name: str,
        *,
        tool_use_id: str | None = None,
        is_error: bool = False,
        summary: str | None = None,
        command: CommandFacts | None = None,
        key_line_scanner: KeyLineScanner | None = None,
    ) -> Artifact:
        """Store bytes verbatim, a text as UTF-8."""
        # A lone surrogate fails to encode: store_failed, nothing left behind.
        pieces = _encoded(payload) if isinstance(payload, str) else _pieces(payload)
        return self.store.store(
            pieces,
            source_tool=tool_name,
            tool_use_id=tool_use_id,
            is_error=is_error,
            summary=summary,
            command=command,
            key_line_scanner=key_line_scanner,
        )

    def _edge_scanner(self, tool_name: str) -> KeyLineScanner:
        """Return a scanner keeping every candidate a preview's ends may border."""
        limit = self.policy.limit_for(tool_name)
        edge = limit.budget * _WINDOW_BYTES_PER_UNIT[limit.unit]
        return KeyLineScanner(self.policy, edge=edge)

    def _pointer(
        self, text: str, artifact: Artifact, reference: ArtifactReference
    ) -> str:
        """Return the preview, or only header and notice for a tiny output.

        The seed's calls store even outputs no preview can be smaller than.
        """
        redact = self.policy.redact_secrets
        try:
            return self._preview_whole(text, artifact, reference, redact=redact)
        except ValueError:
            return build_pointer(self._source(artifact, reference, redact=redact))

    def _preview_whole(
        self,
        text: str,
        artifact: Artifact,
        reference: ArtifactReference,
        scanner: KeyLineScanner | None = None,
        *,
        redact: bool,
    ) -> str:
        """Preview a stored text; `scanner` scanned its UTF-8 as it was stored.

        With `redact`, secrets are masked before the builder measures anything,
        so the budget holds for what is shown (S1.7).
        """
        shown = self._redacted_whole(text, reference.source_tool) if redact else text
        content = artifact.stored_content
        source = self._source(artifact, reference, redact=redact)
        if isinstance(shown, _Windows):
            if scanner is None or content is None:
                # No scan to take key lines from: the builder scans the text.
                middle = text[shown.head_end : shown.tail_start]
                shown = shown.head + middle + shown.tail
            else:
                # Previewed from its two windows, as a stream is.
                windows = self._scanned(
                    PreviewText(shown.head, shown.tail, whole=False),
                    scanner.scan(),
                    redact=True,
                )
                return build_preview(windows, source, self.policy)
        preview = PreviewText(head=shown, tail=shown, whole=True)
        if scanner is not None and content is not None:
            preview = dataclasses.replace(
                self._scanned(preview, scanner.scan(), redact=redact),
                line_count=content.line_count,
                # The artifact's own size: what the notice's omitted count is of.
                size_bytes=content.size_bytes,
                key_line_edge=scanner.edge,
            )
        return build_preview(preview, source, self.policy)

    def _scanned(
        self, preview: PreviewText, scan: KeyLineScan, *, redact: bool
    ) -> PreviewText:
        """Add what the store pass found: key lines, group tallies, counts."""
        key_lines, group_lines = scan.key_lines, scan.group_lines
        if redact:
            key_lines = self._redacted_key_lines(key_lines)
            group_lines = self._redacted_key_lines(group_lines)
        return dataclasses.replace(
            preview,
            key_lines=key_lines,
            group_lines=group_lines,
            group_counts=scan.group_counts,
            counts=scan.facts.shown(),
        )

    def _source(
        self, artifact: Artifact, reference: ArtifactReference, *, redact: bool = False
    ) -> PreviewSource:
        content = artifact.stored_content
        assert content is not None  # noqa: S101 - stored artifacts have content
        command = artifact.command_facts
        summary = reference.summary
        if redact:
            summary = self.redact_summary(summary)
            if command is not None:
                argv = tuple(self.redactor.redact(arg) for arg in command.argv)
                command = dataclasses.replace(command, argv=argv)
        return PreviewSource(
            source_id=reference.source.source_id,
            summary=summary,
            tool_name=reference.source_tool,
            content_sha256=reference.content_sha256,
            handle=reference.handle,
            hint=self.store.hint(reference.handle),
            total_lines=content.line_count,
            total_bytes=content.size_bytes,
            tool_use_id=artifact.tool_use_id,
            is_error=artifact.is_error,
            partial=artifact.state == "partial",
            command=command,
        )

    def _described(self, head: bytes, source: PreviewSource) -> str:
        """Return header, description line and notice (no line if over the budget)."""
        # A stream's recorded summary is its bytes decoded: noise, not shown.
        size = source.total_bytes
        source = dataclasses.replace(source, summary=summarize_binary(head, size))
        view = build_pointer(source, describe_binary(head, size))
        limit = self.policy.limit_for(source.tool_name)
        if self.policy.measure(view, limit.unit) <= limit.budget:
            return view
        return build_pointer(source)

    def _gate_stored(
        self,
        artifact: Artifact,
        reference: ArtifactReference,
        scan: KeyLineScan,
        reason: str,
        listing: str | None = None,
    ) -> GateOutcome:
        """Gate a stored stream from bounded windows of its bytes (S2.4).

        The artifact exists, so every view shows its handle (see the module);
        `reason` is `spilled` for a stream that ended, and stays for one that
        did not.
        """
        handle, size = reference.handle, reference.size_bytes
        limit = self.policy.limit_for(reference.source_tool)
        per_unit = _WINDOW_BYTES_PER_UNIT[limit.unit]
        window = limit.budget * per_unit
        redact = self.policy.redact_secrets
        source = self._source(artifact, reference, redact=redact)
        # Up to here the output may still be under its limit: measure it whole.
        whole = size <= max(2 * window, limit.limit * per_unit)
        head = self.reader.read_artifact_bytes(
            handle, 0, size if whole else max(window, SNIFF_BYTES)
        )
        if is_binary(head):
            kept = "binary" if reason == "spilled" else reason
            return GateOutcome(self._described(head, source), kept, reference)
        if whole:
            text = head.decode("utf-8", "replace")
            under = not self.should_externalize(text, reference.source_tool)
            text = self.redactor.redact(text) if redact else text
            if under:
                view = build_whole(text, source)
                if self.policy.measure(view, limit.unit) <= limit.limit:
                    kept = "under_limit" if reason == "spilled" else reason
                    return GateOutcome(view, kept, reference)
            preview = PreviewText(
                head=text, tail=text, whole=True, counts=scan.facts.shown()
            )
        else:
            # One byte more than the window tells whether it starts a line.
            before = self.reader.read_artifact_bytes(handle, size - window - 1, size)
            head_text = _complete_head(head[:window])
            tail_text = _complete_tail(before[1:])
            if redact:
                redactor = self.redactor
                head_end = Edge.LINE if head_text.endswith("\n") else Edge.MID
                tail_start = Edge.LINE if before[:1] == b"\n" else Edge.MID
                head_text = redactor.redact(head_text, end=head_end)
                tail_text = redactor.redact(tail_text, start=tail_start)
            preview = self._scanned(
                PreviewText(head=head_text, tail=tail_text, whole=False),
                scan,
                redact=redact,
            )
            if listing is not None:
                shown = self.redactor.redact(listing) if redact else listing
                preview = dataclasses.replace(preview, listing=shown)
        try:
            view = build_preview(preview, source, self.policy)
        except ValueError:
            view = build_pointer(source)
        return GateOutcome(view, reason, reference)


class GateStream:
    """A streaming tool result: bytes go to disk as they come; `close()` gates it."""

    def __init__(
        self,
        externalizer: SessionExternalizer,
        tool_name: str,
        tool_use_id: str | None,
    ) -> None:
        self._externalizer = externalizer
        self._tool_name = tool_name
        self._scanner = externalizer._edge_scanner(tool_name)  # noqa: SLF001
        self._stream: ArtifactStream = externalizer.store.open_stream(
            tool_name, tool_use_id=tool_use_id, key_line_scanner=self._scanner
        )
        self._failed: BaseException | None = None
        self._listing = ListingCounter()

    @property
    def handle(self) -> str:
        """Return the handle, readable while the stream is open."""
        return self._stream.handle

    def write(self, data: bytes) -> None:
        """Append bytes verbatim; after a failure further bytes are dropped."""
        if self._failed is not None:
            return
        try:
            self._stream.write(data)
        except Exception as error:  # noqa: BLE001 - S2.4: seal what was stored
            self._failed = error
            return
        self._listing.feed(data)

    def close(
        self, *, interrupted: bool = False, command: CommandFacts | None = None
    ) -> GateOutcome:
        """Seal and return the gated preview; partial after a failure or interruption.

        `interrupted` says the producer was stopped (a signal, a timeout) before
        its output ended: what arrived is kept, sealed as partial (S2.4).
        `command` is what the producing command did; the header shows it.
        """
        ext = self._externalizer
        if self._failed is None and not interrupted:
            artifact = self._stream.close(command=command)
            reason = "spilled"
        elif self._failed is None:
            artifact = self._stream.fail(command=command)
            reason = "interrupted"
        else:
            logger.warning(
                "spillvault: a %s stream failed (%s); kept what was stored as partial",
                self._tool_name,
                self._failed,
            )
            artifact = self._stream.fail(command=command)
            reason = "store_failed"
        if artifact.state == ArtifactState.OPEN:
            # Even the partial seal could not be recorded (a full disk):
            # there is no digest to reference yet; the next open seals it.
            return GateOutcome(self._unsealed_notice(artifact), reason)
        reference = ext.store.reference_for(artifact)
        scan, listing = self._scanner.scan(), self._listing.summary()
        return ext._gate_stored(artifact, reference, scan, reason, listing)  # noqa: SLF001

    def _unsealed_notice(self, artifact: Artifact) -> str:
        """Say what happened to a stream whose partial seal failed too (S2.4)."""
        failed = self._failed
        why = "interrupted" if failed is None else f"{type(failed).__name__}: {failed}"
        return (
            f"[spillvault: the {self._tool_name} output could not be stored "
            f"({why}); the bytes written so "
            f"far stay in artifact {artifact.filename}, which the next session "
            "open seals as partial]"
        )


def text_of(content: Content) -> str | None:
    """Return the text of an all-text content (blocks joined by newlines), else None."""
    if isinstance(content, str):
        return content
    texts = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text":
            return None
        texts.append(str(block.get("text", "")))
    return "\n".join(texts)


def _text_of(content: Content) -> str | None:
    if not isinstance(content, str | list):
        kind = type(content).__name__
        msg = f"content must be a string, bytes or a list of blocks, not {kind}"
        raise TypeError(msg)
    return text_of(content)


@dataclass(frozen=True)
class _Windows:
    """The redacted ends of a long text, and where they end and start in it."""

    head: str
    head_end: int
    tail_start: int
    tail: str


@dataclass(frozen=True)
class _Call:
    """One gate call's facts besides its content."""

    tool_name: str
    arm: Arm
    tool_use_id: str | None
    is_error: bool
    command: CommandFacts | None = None


def _replace(content: Content, preview: str) -> Content:
    if isinstance(content, str):
        return preview
    first = dict(content[0]) if content else {}
    first.update(type="text", text=preview)
    return [first]


def _edge_before(text: str, index: int) -> Edge:
    """Return what a cut of `text` just before `index` is: at a line start or not."""
    return Edge.LINE if text[index - 1] == "\n" else Edge.MID


def _line_end_near(text: str, index: int) -> int:
    """Return the index just past the first newline at or after `index`, if near."""
    newline = text.find("\n", index - 1, index + LINE_END_WINDOW)
    return index if newline < 0 else newline + 1


def _complete_head(data: bytes) -> str:
    """Decode a head window, leaving out a trailing incomplete UTF-8 sequence."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


def _complete_tail(data: bytes) -> str:
    """Decode a tail window, skipping continuation bytes cut from their lead."""
    start = 0
    while start < min(3, len(data)) and 0x80 <= data[start] < 0xC0:
        start += 1
    return data[start:].decode("utf-8", "replace")


def _encoded(text: str) -> Iterator[bytes]:
    """Yield `text` as UTF-8, a piece at a time (no second copy of a huge text)."""
    for start in range(0, len(text), _PIECE):
        yield text[start : start + _PIECE].encode("utf-8")


def _pieces(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(view), _PIECE):
        yield bytes(view[start : start + _PIECE])


__all__ = [
    "ExternalizedToolResult",
    "GateOutcome",
    "GateStream",
    "SessionExternalizer",
]


def _or_default(policy: ArtifactCleanupPolicy | None) -> ArtifactCleanupPolicy:
    """Return `policy`, or the seed's default: a one-day orphan TTL, as a dry run."""
    return ArtifactCleanupPolicy() if policy is None else policy
