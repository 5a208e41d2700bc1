r"""Secret redaction: credentials in what a model sees become masks (issue 20).

Hyperscan runs every rule's probe over an ASCII stand-in of the text (each
character beyond ASCII becomes one `?`, so offsets are the text's own) and
reports where a candidate starts; only there does a rule's Python regex run,
anchored, to confirm the credential and find its secret part, which must also
pass the rule's entropy and placeholder checks. A block rule (a PEM private
key) masks every line between its opener and its closer, one mask a line, so
no newline is ever added or removed: line numbers stay the artifact's.

A mask keeps the kind and a tag: `[REDACTED github-token #3f2a]`, the tag being
4 hex digits of an HMAC-SHA256 of the secret under the redactor's key. Keyed,
the tag is no oracle: without the key, 16 bits of it cannot confirm a guess
at a short password.

A text cut from a larger one may split a credential so that no rule matches
the part left. The caller says what each end of the text is (`Edge`), and at
a cut this module masks what a rule could have matched across it:

* mid-line at the end: the run of credential characters that ends there;
* mid-line at the start: every run that starts within `CUT_REACH` characters
  of it (a rule's context, a key or `Bearer`, is at most that far from its
  value, so a value whose context was cut off is still masked);
* at either end, mid-line or not: an unclosed block (an opener with no closer
  after it before an end cut, or a closer with no opener before it after a
  start cut) is masked up to the cut.

A short run of letters, or a run of low entropy, is left alone at a cut (see
`CUT_MIN_LETTERS`).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import threading
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

from spillvault.specs.secret_rules import SecretRule, load_secret_rules

from .errors import SpillPolicyError
from .hyperscan_build import build

if TYPE_CHECKING:
    from collections.abc import Sequence

try:
    import hyperscan
except ImportError:  # pragma: no cover - the wheel is a dependency on Linux
    hyperscan = None  # type: ignore[assignment]

CUT_REACH: Final = 40
CUT_MIN_ENTROPY: Final = 2.0
CUT_MIN_LETTERS: Final = 8
"""A run at a cut is left alone when it has under `CUT_MIN_ENTROPY` bits a
character (`LLLL`, `====`, three characters of anything) or is fewer than
`CUT_MIN_LETTERS` ASCII letters alone (`beta`, `fine`): no credential, or too
little of one to matter."""
TAG_HEX: Final = 4
KEY_BYTES: Final = 32
_DELIMITERS: Final = " \t\r\n\f\v\"'`,;()<>[]{}|\\"
_RUN: Final = re.compile(r"[^\s\"'`,;()<>\[\]{}|\\]+")
# What a closed block's body must be once its headers, whitespace and escaped
# newlines are gone: base64 (code that builds a PEM string is not a key).
_BLOCK_NOISE: Final = re.compile(r"Proc-Type:[^\n]*|DEK-Info:[^\n]*|\s+|\\n")
_BLOCK_BODY: Final = re.compile(r"[A-Za-z0-9+/=]{32,}")
_BODY_LINE: Final = re.compile(
    r"\s*(?:[A-Za-z0-9+/=]*|Proc-Type:[^\n]*|DEK-Info:[^\n]*)\s*"
)


class Edge(Enum):
    """What one end of a text is: the output's own end, or a cut into it."""

    WHOLE = "whole"  # the output itself ends (or starts) here
    LINE = "line"  # cut at a line boundary
    MID = "mid"  # cut inside a line

    @property
    def is_cut(self) -> bool:
        """Tell whether something of the output lies beyond this end."""
        return self is not Edge.WHOLE


@dataclass(frozen=True)
class _Rule:
    """A rule with its Python regexes compiled."""

    spec: SecretRule
    match: re.Pattern[str]
    allow: re.Pattern[str] | None
    closer: re.Pattern[str] | None


@dataclass
class _Span:
    """A stretch of the text to mask, and the kind its mask shows."""

    start: int
    end: int
    kind: str


class SecretRules:
    """The rules compiled once: one Hyperscan database of every probe and closer."""

    def __init__(self, rules: Sequence[SecretRule]) -> None:
        if hyperscan is None:  # pragma: no cover - the wheel is a dependency
            msg = "secret redaction needs the hyperscan wheel"
            raise SpillPolicyError(msg)
        self.rules = tuple(_compiled(rule) for rule in rules)
        expressions = [rule.probe.encode("ascii") for rule in rules]
        self._closer_ids: dict[int, int] = {}
        for index, rule in enumerate(rules):
            if rule.closer is not None:
                self._closer_ids[len(expressions)] = index
                expressions.append(rule.closer.encode("ascii"))
        try:
            database = build(
                expressions, [hyperscan.HS_FLAG_SOM_LEFTMOST] * len(expressions)
            )
        except hyperscan.error as error:
            msg = f"secret rules do not compile for Hyperscan: {error}"
            raise SpillPolicyError(msg) from error
        self._database = database
        self._scratch = threading.local()  # a scan releases the GIL

    def probe(self, text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Return (rule, start) of every probe hit and of every closer hit, sorted."""
        data = text.encode("ascii", "replace")  # one byte per character
        hits: set[tuple[int, int]] = set()

        def on_match(ident: int, start: int, _end: int, _flags: int, _ctx: Any) -> None:
            hits.add((ident, start))

        scratch = getattr(self._scratch, "value", None)
        if scratch is None:
            scratch = self._scratch.value = hyperscan.Scratch(self._database)
        with suppress(hyperscan.ScanTerminated):
            self._database.scan(data, match_event_handler=on_match, scratch=scratch)
        probes = sorted(
            (ident, start) for ident, start in hits if ident not in self._closer_ids
        )
        closers = sorted(
            (self._closer_ids[ident], start)
            for ident, start in hits
            if ident in self._closer_ids
        )
        return probes, closers


def _compiled(rule: SecretRule) -> _Rule:
    closer = None if rule.closer is None else re.compile(rule.closer, re.ASCII)
    allow = None if rule.allow is None else re.compile(rule.allow, re.ASCII)
    return _Rule(rule, re.compile(rule.match, re.ASCII), allow, closer)


@lru_cache(maxsize=1)
def packaged_rules() -> SecretRules:
    """Return the packaged rules (`specs/secrets.toml`), compiled once."""
    return SecretRules(load_secret_rules())


def entropy(text: str) -> float:
    """Return the Shannon entropy of `text` in bits per character."""
    if not text:
        return 0.0
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in Counter(text).values())


def looks_like_block_body(line: str) -> bool:
    """Tell whether a line could lie inside a PEM block (base64 or its headers)."""
    return _BODY_LINE.fullmatch(line) is not None


class Redactor:
    """Masks secrets in text under one key (see the module for what and how)."""

    def __init__(self, key: bytes, rules: SecretRules | None = None) -> None:
        if not isinstance(key, bytes) or len(key) < KEY_BYTES // 2:
            msg = f"a redaction key must be at least {KEY_BYTES // 2} bytes"
            raise SpillPolicyError(msg)
        self._key = key
        self._rules = packaged_rules() if rules is None else rules

    def tag(self, secret: str) -> str:
        """Return the mask tag of `secret`: 4 hex digits of its keyed hash."""
        data = secret.encode("utf-8", "surrogatepass")
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()[:TAG_HEX]

    def mask(self, kind: str, secret: str) -> str:
        """Return the one-line mask of `secret`."""
        return f"[REDACTED {kind} #{self.tag(secret)}]"

    def redact(
        self, text: str, *, start: Edge = Edge.WHOLE, end: Edge = Edge.WHOLE
    ) -> str:
        """Return `text` with every secret masked; `text` itself when there is none."""
        spans = self.spans(text, start=start, end=end)
        if not spans:
            return text
        parts: list[str] = []
        done = 0
        for span in spans:
            parts.append(text[done : span.start])
            parts.append(self._masked(text[span.start : span.end], span.kind))
            done = span.end
        parts.append(text[done:])
        return "".join(parts)

    def redact_lines(
        self, lines: Sequence[str], *, start: Edge = Edge.WHOLE, end: Edge = Edge.WHOLE
    ) -> list[str]:
        """Redact consecutive lines as one text and return them line for line."""
        joined = "\n".join(lines)
        redacted = self.redact(joined, start=start, end=end)
        if redacted is joined:
            return list(lines)
        return redacted.split("\n")

    def ends_inside_block(self, text: str) -> bool:
        """Tell whether `text` ends inside a block: an opener, no closer after it."""
        probes, closers = self._rules.probe(text)
        openers = [s for i, s in probes if self._rules.rules[i].closer is not None]
        if not openers:
            return False
        last = openers[-1]
        return not any(s > last for _i, s in closers)

    def spans(self, text: str, *, start: Edge, end: Edge) -> list[_Span]:
        """Return the stretches to mask, sorted and disjoint."""
        probes, closers = self._rules.probe(text)
        found: list[_Span] = []
        found += self._blocks(text, probes, closers, start=start, end=end)
        found += self._tokens(text, probes)
        found += _cut_runs(text, start=start, end=end)
        return _merged(found)

    def _masked(self, secret: str, kind: str) -> str:
        """Mask each line of `secret` on its own, keeping every newline."""
        tag_of = self.mask(kind, secret)
        return "\n".join(
            tag_of if piece.strip() else piece for piece in secret.split("\n")
        )

    def _tokens(self, text: str, probes: list[tuple[int, int]]) -> list[_Span]:
        """Confirm each probe hit of a token rule and return its secret span."""
        spans: list[_Span] = []
        for index, at in probes:
            rule = self._rules.rules[index]
            if rule.closer is not None:
                continue
            found = rule.match.match(text, at)
            if found is None:
                continue
            group = "s" if "s" in rule.match.groupindex else 0
            first, last = found.span(group)
            if _confirmed(rule, text[first:last]):
                spans.append(_Span(first, last, rule.spec.id))
        return spans

    def _blocks(
        self,
        text: str,
        probes: list[tuple[int, int]],
        closers: list[tuple[int, int]],
        *,
        start: Edge,
        end: Edge,
    ) -> list[_Span]:
        """Return the bodies of blocks, and of blocks a cut left open."""
        spans: list[_Span] = []
        for index, rule in enumerate(self._rules.rules):
            if rule.closer is None:
                continue
            ends = [s for i, s in closers if i == index]
            headers = [
                found
                for found in (
                    rule.match.match(text, s) for i, s in probes if i == index
                )
                if found is not None
            ]
            done = 0
            first_opener = headers[0].start() if headers else len(text)
            if start.is_cut and ends and ends[0] < first_opener:
                # A closer with no opener before it: a block the cut left open.
                spans.append(_Span(0, ends[0], rule.spec.id))
                done = ends[0] + 1
            for header in headers:
                if header.start() < done:
                    continue
                closing = next((s for s in ends if s >= header.end()), None)
                if closing is None:
                    if end.is_cut:
                        spans.append(_Span(header.end(), len(text), rule.spec.id))
                    break
                if _BLOCK_BODY.fullmatch(
                    _BLOCK_NOISE.sub("", text[header.end() : closing])
                ):
                    spans.append(_Span(header.end(), closing, rule.spec.id))
                done = closing + 1
        return [span for span in spans if span.end > span.start]


def _confirmed(rule: _Rule, secret: str) -> bool:
    """Tell whether a matched secret passes the rule's checks."""
    spec = rule.spec
    if spec.min_entropy is not None and entropy(secret) < spec.min_entropy:
        return False
    if spec.letters_and_digits and not (
        any(c.isascii() and c.isalpha() for c in secret)
        and any(c.isascii() and c.isdigit() for c in secret)
    ):
        return False
    return rule.allow is None or rule.allow.fullmatch(secret) is None


def _cut_runs(text: str, *, start: Edge, end: Edge) -> list[_Span]:
    """Return the credential runs a mid-line cut may have split (see the module)."""
    spans: list[_Span] = []
    if start is Edge.MID:
        line_end = text.find("\n")
        reach = min(CUT_REACH, len(text) if line_end < 0 else line_end)
        for run in _RUN.finditer(text, 0, len(text) if line_end < 0 else line_end):
            if run.start() >= reach:
                break
            spans.append(_Span(run.start(), run.end(), "cut"))
    if end is Edge.MID and text and text[-1] not in _DELIMITERS:
        first = len(text)
        while first > 0 and text[first - 1] not in _DELIMITERS:
            first -= 1
        spans.append(_Span(first, len(text), "cut"))
    return [s for s in spans if _could_be_credential(text[s.start : s.end])]


def _could_be_credential(run: str) -> bool:
    """Tell whether a run at a cut is worth a mask (see `CUT_MIN_LETTERS`)."""
    if entropy(run) < CUT_MIN_ENTROPY:
        return False
    return len(run) >= CUT_MIN_LETTERS or not (run.isascii() and run.isalpha())


def _merged(spans: list[_Span]) -> list[_Span]:
    """Return the union of overlapping spans, each keeping its first kind."""
    merged: list[_Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -s.end)):
        if merged and span.start < merged[-1].end:
            merged[-1].end = max(merged[-1].end, span.end)
        else:
            merged.append(_Span(span.start, span.end, span.kind))
    return merged


__all__ = [
    "CUT_REACH",
    "Edge",
    "Redactor",
    "SecretRules",
    "entropy",
    "looks_like_block_body",
    "packaged_rules",
]
