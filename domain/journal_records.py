"""Journal records (S4.5, J1, J2, J5): the canonical line codec and the chain verifier.

Pure: bytes in, records out; the file is `spillvault.adapters.storage.journal_file`.

A record is one line of canonical JSON (J1): `json.dumps(..., sort_keys=True,
separators=(",", ":"), ensure_ascii=True, allow_nan=False)` plus a newline. Its
object has exactly the keys `at`, `claim`, `phase`, `position`, `prev`,
`sequence`, `session_id`, `sha256` and `transaction_id`. `claim` is always
present: on a `prepared` record an object with exactly `content_sha256`,
`reference_count`, `retain_until` and `source_id`, on every other record
`null` (a fixed key set leaves no doubt whether a field went missing).
`sha256` is the hex SHA-256 of the canonical JSON of all the other fields.

Reading is strict: a line must be ASCII, one JSON object with exactly those
keys and types, byte-equal to its own re-serialisation (so whitespace, key
order, escapes, CR before the newline or a BOM all fail) and hash-valid. The
chain (`JournalChain`) then checks sequence, `prev`, position order, session
and the lease transition of each record. Comparing each record with the stored
event at its position is the caller's job: nothing else catches a record that
was edited with every later record re-chained. `RecordProjector` builds those
stored events' records, chained, for that comparison and for catching up.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from json.encoder import encode_basestring_ascii
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, NewType, cast

from .enums import ArtifactLeasePhase
from .errors import ArtifactLeaseJournalError, IllegalTransition
from .machines import LEASE_MACHINE

if TYPE_CHECKING:
    from collections.abc import Mapping

GENESIS_PREV = "0" * 64
"""The `prev` of the first record."""

ClaimData = dict[str, str | int | None]
"""A claim as a journal record holds it (`ArtifactRetentionClaim.to_dict()`)."""

RECORD_FIELDS = frozenset(
    {
        "at",
        "claim",
        "phase",
        "position",
        "prev",
        "sequence",
        "session_id",
        "sha256",
        "transaction_id",
    }
)
"""The JSON keys of every record."""

CLAIM_FIELDS = frozenset(
    {"content_sha256", "reference_count", "retain_until", "source_id"}
)
"""The JSON keys of a prepared record's claim."""

JournalLine = NewType("JournalLine", bytes)
"""A record's canonical line, newline included: what `encode` returns (J1)."""

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_BOM = b"\xef\xbb\xbf"
_PREPARED = ArtifactLeasePhase.PREPARED.value
_PHASES = frozenset(LEASE_MACHINE.states)
_NEW = "in a new journal record"


@dataclass(frozen=True)
class JournalRecord:
    """One journal line: a lease event's projection, chained to its predecessor.

    Build records with `make_record` or `decode_line`, which guarantee the hash.
    """

    sequence: int
    prev: str
    position: int
    session_id: str
    transaction_id: str
    phase: str
    claim: ClaimData | None
    at: str
    sha256: str

    def body(self) -> dict[str, object]:
        """Return the hashed fields (every field but `sha256`) as JSON-ready data."""
        return {
            "at": self.at,
            "claim": None if self.claim is None else dict(self.claim),
            "phase": self.phase,
            "position": self.position,
            "prev": self.prev,
            "sequence": self.sequence,
            "session_id": self.session_id,
            "transaction_id": self.transaction_id,
        }


class _Fault(Exception):
    """A record-level fault, raised before its location is known."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(kind)
        self.kind = kind
        self.detail = detail

    def located(self, where: str) -> ArtifactLeaseJournalError:
        """Return the public error naming the fault and where it is."""
        suffix = f": {self.detail}" if self.detail else ""
        return ArtifactLeaseJournalError(f"{self.kind} {where}{suffix}")


# The canonical JSON of a record, written field by field in sorted key order:
# what json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
# writes, without walking a dict per record. `encode_basestring_ascii` is the
# C function json.dumps itself calls for a str when ensure_ascii is set.
_json_str = encode_basestring_ascii
_CLAIM = '{"content_sha256":%s,"reference_count":%d,"retain_until":%s,"source_id":%s}'
# The body up to where `sha256` sorts (after `session_id`), and after it.
_HEAD = (
    '{"at":%s,"claim":%s,"phase":%s,"position":%d,"prev":%s,"sequence":%d,'
    '"session_id":%s,'
)
_TAIL = '"transaction_id":%s}'
_LINE = '%s"sha256":%s,%s\n'


def _claim_json(claim: ClaimData | None) -> str:
    if claim is None:
        return "null"
    until = claim["retain_until"]
    return _CLAIM % (
        _json_str(cast("str", claim["content_sha256"])),
        claim["reference_count"],
        "null" if until is None else _json_str(cast("str", until)),
        _json_str(cast("str", claim["source_id"])),
    )


def _halves(record: JournalRecord) -> tuple[str, str]:
    """Return the canonical body's text before `sha256`'s place and after it."""
    head = _HEAD % (
        _json_str(record.at),
        _claim_json(record.claim),
        _json_str(record.phase),
        record.position,
        _json_str(record.prev),
        record.sequence,
        _json_str(record.session_id),
    )
    return head, _TAIL % _json_str(record.transaction_id)


def _hash(head: str, tail: str) -> str:
    """Return the hex SHA-256 of the canonical body `head + tail` (J2)."""
    return hashlib.sha256((head + tail).encode("ascii")).hexdigest()


def _line(head: str, sha256: str, tail: str) -> JournalLine:
    return JournalLine((_LINE % (head, _json_str(sha256), tail)).encode("ascii"))


def _digest(record: JournalRecord) -> str:
    return _hash(*_halves(record))


def encode(record: JournalRecord) -> JournalLine:
    """Return the record's canonical line, newline included (J1)."""
    head, tail = _halves(record)
    return _line(head, record.sha256, tail)


# field checks ---------------------------------------------------------------


def _integer(name: str, value: object, minimum: int) -> int:
    # bool is an int subclass; JSON true must not pass for 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _Fault(f"invalid field {name!r}", f"must be an integer >= {minimum}")
    return value


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise _Fault(f"invalid field {name!r}", "must be a non-empty string")
    return value


def _hex_digest(name: str, value: object) -> str:
    if not isinstance(value, str) or not _SHA256_HEX.fullmatch(value):
        raise _Fault(f"invalid field {name!r}", "must be 64 lower-case hex digits")
    return value


def _timestamp(name: str, value: object) -> str:
    text = _text(name, value)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise _Fault(f"invalid field {name!r}", "must be ISO-8601") from None
    if parsed.utcoffset() is None:
        raise _Fault(f"invalid field {name!r}", "must carry a UTC offset")
    return text


def _aware(value: object) -> bool:
    """Say whether `_timestamp` would accept `value` (a fast path's check)."""
    if type(value) is not str:
        return False
    try:
        return datetime.fromisoformat(value).utcoffset() is not None
    except ValueError:
        return False


def _exact_keys(obj: Mapping[str, object], keys: frozenset[str], prefix: str) -> None:
    if obj.keys() == keys:
        return
    missing = sorted(keys - obj.keys())
    if missing:
        raise _Fault(f"missing field {prefix + missing[0]!r}")
    extra = sorted(obj.keys() - keys)
    raise _Fault(f"unexpected field {prefix + extra[0]!r}")


def _claim(value: object, phase: str) -> ClaimData | None:
    if phase != _PREPARED:
        if value is not None:
            raise _Fault("invalid field 'claim'", f"must be null on a {phase} record")
        return None
    if not isinstance(value, dict):
        raise _Fault("invalid field 'claim'", "must be an object on a prepared record")
    _exact_keys(value, CLAIM_FIELDS, "claim.")
    until = value["retain_until"]
    return {
        "source_id": _text("claim.source_id", value["source_id"]),
        "content_sha256": _hex_digest("claim.content_sha256", value["content_sha256"]),
        "reference_count": _integer(
            "claim.reference_count", value["reference_count"], 1
        ),
        "retain_until": None
        if until is None
        else _timestamp("claim.retain_until", until),
    }


def _plain_claim_json(value: object) -> str | None:
    """Return the canonical JSON of a claim plainly valid as it is, else None.

    Exact types only, so whatever it accepts `_claim` accepts unchanged; the
    rest (faults, int or str subclasses) is left to `_claim`.
    """
    if type(value) is not dict or value.keys() != CLAIM_FIELDS:
        return None
    source_id, digest = value["source_id"], value["content_sha256"]
    count, until = value["reference_count"], value["retain_until"]
    if (
        type(source_id) is str
        and source_id
        and type(digest) is str
        and _SHA256_HEX.fullmatch(digest)
        and type(count) is int
        and count >= 1
        and (until is None or _aware(until))
    ):
        return _CLAIM % (
            _json_str(digest),
            count,
            "null" if until is None else _json_str(until),
            _json_str(source_id),
        )
    return None


def _phase(value: object) -> str:
    if not isinstance(value, str) or value not in _PHASES:
        raise _Fault("invalid field 'phase'", f"must be one of {sorted(_PHASES)}")
    return value


def _checked(fields: Mapping[str, object], sha256: str) -> JournalRecord:
    phase = _phase(fields["phase"])
    return JournalRecord(
        sequence=_integer("sequence", fields["sequence"], 1),
        prev=_hex_digest("prev", fields["prev"]),
        position=_integer("position", fields["position"], 1),
        session_id=_text("session_id", fields["session_id"]),
        transaction_id=_text("transaction_id", fields["transaction_id"]),
        phase=phase,
        claim=_claim(fields["claim"], phase),
        at=_timestamp("at", fields["at"]),
        sha256=sha256,
    )


def make_record(  # noqa: PLR0913 - one argument per hashed field (J2)
    *,
    sequence: int,
    prev: str,
    position: int,
    session_id: str,
    transaction_id: str,
    phase: str,
    claim: Mapping[str, object] | None,
    at: str,
) -> JournalRecord:
    """Validate the fields of a new record and compute its `sha256`."""
    fields = {
        "sequence": sequence,
        "prev": prev,
        "position": position,
        "session_id": session_id,
        "transaction_id": transaction_id,
        "phase": phase,
        # The claim is checked as a plain dict, the shape JSON gives it back.
        "claim": None if claim is None else dict(claim),
        "at": at,
    }
    try:
        unhashed = _checked(fields, "")
    except _Fault as fault:
        raise fault.located(_NEW) from None
    return replace(unhashed, sha256=_digest(unhashed))


class RecordProjector:
    """Builds the next records of a journal from lease events, chained (J1, J2).

    It checks each event's fields as `make_record` does (its sequence and
    `prev` come from the chain, so they are right by construction) and writes
    each line and hashes it once: `line` to compare with a journal or append
    to one, `record` where the record itself is wanted. The claim is taken as
    JSON gives it, an object or null. A failed check leaves the chain as it was.
    """

    def __init__(
        self,
        session_id: str,
        *,
        last_sequence: int = 0,
        last_sha256: str = GENESIS_PREV,
        last_position: int = 0,
    ) -> None:
        try:
            self._session_id = _text("session_id", session_id)
            self._session_json = _json_str(session_id)
            self.last_sequence = _integer("sequence", last_sequence, 0)
            self.last_sha256 = _hex_digest("prev", last_sha256)
            self.last_position = _integer("position", last_position, 0)
        except _Fault as fault:
            raise fault.located(_NEW) from None

    def line(
        self,
        *,
        position: int,
        transaction_id: str,
        phase: str,
        claim: object,
        at: str,
    ) -> JournalLine:
        """Check the next event's fields, chain its record and return its line."""
        # The plain case in one pass; anything else through make_record's
        # checks, which name the fault or accept it (an int subclass, say).
        claim_json = "null" if claim is None else _plain_claim_json(claim)
        if not (
            claim_json is not None
            and (phase == _PREPARED) is (claim is not None)
            and type(phase) is str
            and phase in _PHASES
            and type(position) is int
            and position >= 1
            and type(transaction_id) is str
            and transaction_id
            and _aware(at)
        ):
            checked = self._checked(position, transaction_id, phase, claim, at)
            claim_json = _claim_json(checked)
        sequence = self.last_sequence + 1
        head = _HEAD % (
            _json_str(at),
            claim_json,
            _json_str(phase),
            position,
            _json_str(self.last_sha256),
            sequence,
            self._session_json,
        )
        tail = _TAIL % _json_str(transaction_id)
        sha256 = _hash(head, tail)
        self.last_sequence, self.last_sha256 = sequence, sha256
        self.last_position = position
        return _line(head, sha256, tail)

    def record(
        self,
        *,
        position: int,
        transaction_id: str,
        phase: str,
        claim: object,
        at: str,
    ) -> JournalRecord:
        """Check the next event's fields, chain its record and return it."""
        checked = self._checked(position, transaction_id, phase, claim, at)
        prev = self.last_sha256
        self.line(
            position=position,
            transaction_id=transaction_id,
            phase=phase,
            claim=checked,
            at=at,
        )
        return JournalRecord(
            sequence=self.last_sequence,
            prev=prev,
            position=position,
            session_id=self._session_id,
            transaction_id=transaction_id,
            phase=phase,
            claim=checked,
            at=at,
            sha256=self.last_sha256,
        )

    @staticmethod
    def _checked(
        position: object,
        transaction_id: object,
        phase: object,
        claim: object,
        at: object,
    ) -> ClaimData | None:
        """Check an event's fields as `make_record` does; return the claim's copy."""
        try:
            # In the record's `_checked` order: a bad event names the same
            # fault first as make_record would.
            known = _phase(phase)
            _integer("position", position, 1)
            _text("transaction_id", transaction_id)
            checked = _claim(claim, known)
            _timestamp("at", at)
        except _Fault as fault:
            raise fault.located(_NEW) from None
        return checked


# decoding -------------------------------------------------------------------


def _no_constants(name: str) -> object:
    raise ValueError(name)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # json keeps the last of duplicate keys; a strict reader names them instead.
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Fault(f"duplicate key {key!r}")
        seen.add(key)
    return dict(pairs)


def _decode(line: bytes, where: str) -> JournalRecord:
    if line.endswith(b"\n"):
        line = line[:-1]
    try:
        return _parse(line)
    except _Fault as fault:
        raise fault.located(where) from None


def _parse(line: bytes) -> JournalRecord:
    if not line:
        raise _Fault("empty line")
    if line.startswith(_BOM):
        raise _Fault("byte order mark")
    if b"\x00" in line:
        raise _Fault("NUL byte")
    if not line.isascii():
        raise _Fault("non-ASCII byte")
    try:
        obj = json.loads(
            line.decode("ascii"),
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constants,
        )
    except (ValueError, RecursionError):
        raise _Fault("invalid JSON") from None
    if not isinstance(obj, dict):
        raise _Fault("not a JSON object")
    _exact_keys(obj, RECORD_FIELDS, "")
    record = _checked(obj, _hex_digest("sha256", obj["sha256"]))
    if encode(record) != line + b"\n":
        raise _Fault("not canonical")
    if _digest(record) != record.sha256:
        raise _Fault("hash mismatch")
    return record


def decode_line(line: bytes, line_no: int) -> JournalRecord:
    """Decode one journal line strictly; errors name the fault and `line_no`.

    `line` may end with its newline; an empty line is an error ("empty line").
    """
    return _decode(line, f"at line {line_no}")


def decode_line_at(line: bytes, *, offset: int) -> JournalRecord:
    """Decode one journal line whose number is unknown; errors name its offset."""
    return _decode(line, f"at offset {offset}")


# chain ----------------------------------------------------------------------


class JournalChain:
    """Checks records one by one: sequence, chain, positions, session, transitions.

    A fresh chain starts before line 1. A chain resumed from a checkpoint takes
    the last verified sequence, hash and position (and the next line number,
    by default the sequence after the last). `phases` maps every transaction
    id journaled before the checkpoint to its phase. When it is not given on
    resumption the phases are unknown: a transaction first seen after the
    checkpoint may then be in any phase (its legality is not checked; the
    caller compares every record with the stored event anyway), and from that
    record on its transitions are checked. From the start nothing precedes,
    so the map is known and empty.
    """

    def __init__(  # noqa: PLR0913 - a checkpoint's fields
        self,
        *,
        session_id: str,
        last_sequence: int = 0,
        last_sha256: str = GENESIS_PREV,
        last_position: int = 0,
        next_line: int | None = None,
        phases: Mapping[str, str] | None = None,
    ) -> None:
        self._session_id = session_id
        self._last_sequence = last_sequence
        self._last_sha256 = last_sha256
        self._last_position = last_position
        self._next_line = last_sequence + 1 if next_line is None else next_line
        self._phases_known = phases is not None or last_sequence == 0
        self._phases: dict[str, str] = dict(phases or {})

    @property
    def next_line(self) -> int:
        """The line number the next record is checked as."""
        return self._next_line

    @property
    def last_sequence(self) -> int:
        """The last accepted record's sequence (0 before the first)."""
        return self._last_sequence

    @property
    def last_sha256(self) -> str:
        """The last accepted record's hash (`GENESIS_PREV` before the first)."""
        return self._last_sha256

    @property
    def last_position(self) -> int:
        """The last accepted record's store position (0 before the first)."""
        return self._last_position

    @property
    def phases_known(self) -> bool:
        """Whether every transaction's phase is known (so every record is checked)."""
        return self._phases_known

    @property
    def phases(self) -> Mapping[str, str]:
        """Each transaction id seen (or given) and its current phase."""
        return MappingProxyType(self._phases)

    def accept(self, record: JournalRecord) -> JournalRecord:
        """Check `record` as the next line and return it; raise, unchanged, if not."""
        where = f"line {self._next_line}"
        expected = self._last_sequence + 1
        if record.sequence != expected:
            kind = (
                "sequence gap" if record.sequence > expected else "duplicate sequence"
            )
            msg = f"{kind} at {where}: expected {expected}, found {record.sequence}"
            raise ArtifactLeaseJournalError(msg)
        if record.prev != self._last_sha256:
            msg = f"broken chain at {where}: prev is not the hash of the record before"
            raise ArtifactLeaseJournalError(msg)
        if record.session_id != self._session_id:
            msg = (
                f"foreign session at {where}: "
                f"{record.session_id!r} is not {self._session_id!r}"
            )
            raise ArtifactLeaseJournalError(msg)
        if record.position <= self._last_position:
            msg = (
                f"position out of order at {where}: "
                f"{record.position} after {self._last_position}"
            )
            raise ArtifactLeaseJournalError(msg)
        self._check_transition(record, where)
        self._phases[record.transaction_id] = record.phase
        self._last_sequence = record.sequence
        self._last_sha256 = record.sha256
        self._last_position = record.position
        self._next_line += 1
        return record

    def accept_line(self, line: bytes) -> JournalRecord:
        """Decode `line` as the next line number and accept the record."""
        return self.accept(decode_line(line, self._next_line))

    def _check_transition(self, record: JournalRecord, where: str) -> None:
        current = self._phases.get(record.transaction_id)
        try:
            if current is not None:
                trigger = LEASE_MACHINE.trigger_into(record.phase)
                if trigger is None:
                    msg = f"transaction already exists in phase {current!r}"
                    raise IllegalTransition(msg)
                LEASE_MACHINE.decide(current, trigger)
            elif self._phases_known:
                LEASE_MACHINE.check_creation(record.phase)
        except IllegalTransition as error:
            msg = (
                f"illegal transition at {where}: {record.phase} "
                f"for {record.transaction_id!r} ({error})"
            )
            raise ArtifactLeaseJournalError(msg) from error


# splitting ------------------------------------------------------------------


class JournalSplit(NamedTuple):
    """A journal's bytes cut at the last newline (J5)."""

    lines: list[tuple[int, bytes]]
    """Each complete line's start offset and bytes, newline excluded."""
    complete_end: int
    """The offset just past the last complete line (`start_offset` if none)."""
    torn: bytes
    """The unterminated tail: a torn append (may be empty)."""


def split_journal(data: bytes, *, start_offset: int = 0) -> JournalSplit:
    """Split journal bytes read from `start_offset` into lines and a torn tail.

    Lines are split on newline bytes only. Empty lines are kept: `decode_line`
    rejects them ("empty line at line N"), so their numbering stays exact.
    """
    cut = data.rfind(b"\n") + 1
    offset = start_offset
    lines: list[tuple[int, bytes]] = []
    if cut:
        for line in data[: cut - 1].split(b"\n"):
            lines.append((offset, line))
            offset += len(line) + 1
    return JournalSplit(lines, start_offset + cut, data[cut:])


__all__ = [
    "CLAIM_FIELDS",
    "GENESIS_PREV",
    "RECORD_FIELDS",
    "ClaimData",
    "JournalChain",
    "JournalLine",
    "JournalRecord",
    "JournalSplit",
    "RecordProjector",
    "decode_line",
    "decode_line_at",
    "encode",
    "make_record",
    "split_journal",
]
