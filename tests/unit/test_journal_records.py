"""The journal record codec and chain verifier (S4.5, J1, J2, J5): robustness matrix."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.journal_records import (
    CLAIM_FIELDS,
    GENESIS_PREV,
    RECORD_FIELDS,
    JournalChain,
    JournalRecord,
    RecordProjector,
    decode_line,
    decode_line_at,
    encode,
    make_record,
    split_journal,
)

if TYPE_CHECKING:
    from collections.abc import Callable

SESSION = "session-a"
LIFECYCLES = (
    ("prepared", "committed", "released"),
    ("prepared", "aborted"),
    ("prepared", "committed"),
)


def claim_for(tx: str, session_id: str = SESSION) -> dict[str, object]:
    digest = hashlib.sha256(tx.encode("utf-8", "surrogatepass")).hexdigest()
    return {
        "source_id": f"artifact:{session_id}:tool_result_001.txt:{digest[:12]}",
        "content_sha256": digest,
        "reference_count": 2,
        "retain_until": "2026-02-01T00:00:00+00:00",
    }


def legal_steps(count: int) -> list[tuple[str, str]]:
    """`count` steps of overlapping, legal lease life cycles."""
    steps: list[tuple[str, str]] = []
    number = 0
    while len(steps) < count:
        first, second = f"tx-{number}", f"tx-{number + 1}"
        one = LIFECYCLES[number % 3]
        two = LIFECYCLES[(number + 1) % 3]
        # Interleave two transactions so the chain sees them overlap.
        for index in range(max(len(one), len(two))):
            steps.extend(
                (tx, life[index])
                for tx, life in ((first, one), (second, two))
                if index < len(life)
            )
        number += 2
    return steps[:count]


def build(
    steps: list[tuple[str, str]],
    *,
    session_id: str = SESSION,
    positions: list[int] | None = None,
    first_sequence: int = 1,
    prev: str = GENESIS_PREV,
) -> list[JournalRecord]:
    records = []
    for index, (tx, phase) in enumerate(steps):
        record = make_record(
            sequence=first_sequence + index,
            prev=prev,
            position=positions[index] if positions else 3 * (first_sequence + index),
            session_id=session_id,
            transaction_id=tx,
            phase=phase,
            claim=claim_for(tx, session_id) if phase == "prepared" else None,
            at=f"2026-01-01T00:{index // 60 % 60:02d}:{index % 60:02d}+00:00",
        )
        records.append(record)
        prev = record.sha256
    return records


def journal_bytes(records: list[JournalRecord]) -> bytes:
    return b"".join(encode(record) for record in records)


def verify(data: bytes, session_id: str = SESSION) -> tuple[list[JournalRecord], bytes]:
    """Verify every complete line from the start; return records and torn tail."""
    split = split_journal(data)
    chain = JournalChain(session_id=session_id)
    return [chain.accept_line(line) for _, line in split.lines], split.torn


def canonical(obj: object) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True
    ).encode()


def rehashed(obj: dict[str, object]) -> bytes:
    """The canonical line of `obj` with its sha256 recomputed (a forger's record)."""
    body = {key: value for key, value in obj.items() if key != "sha256"}
    return canonical({**body, "sha256": hashlib.sha256(canonical(body)).hexdigest()})


def as_object(record: JournalRecord) -> dict[str, object]:
    return json.loads(encode(record))


def raises(message: str, *, whole: bool = False) -> pytest.RaisesExc[Exception]:
    """Expect an `ArtifactLeaseJournalError` whose message starts with `message`."""
    pattern = "^" + re.escape(message) + ("$" if whole else "")
    return pytest.raises(ArtifactLeaseJournalError, match=pattern)


def fails(line: bytes, message: str, line_no: int = 1) -> None:
    with raises(message):
        decode_line(line, line_no)


TWENTY = build(legal_steps(20))
FIVE = build(legal_steps(5))


# the codec ------------------------------------------------------------------


def test_a_record_is_one_canonical_ascii_line() -> None:
    record = TWENTY[0]
    line = encode(record)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert line.isascii()
    assert set(json.loads(line)) == RECORD_FIELDS
    assert line == canonical(json.loads(line)) + b"\n"
    body = {key: value for key, value in json.loads(line).items() if key != "sha256"}
    assert record.sha256 == hashlib.sha256(canonical(body)).hexdigest()
    assert record.body() == body


def test_claim_key_is_always_present_and_null_unless_prepared() -> None:
    for record in TWENTY:
        obj = as_object(record)
        assert "claim" in obj
        assert (obj["claim"] is not None) == (record.phase == "prepared")


def test_decode_round_trips_with_or_without_the_newline() -> None:
    for number, record in enumerate(TWENTY, 1):
        assert decode_line(encode(record), number) == record
        assert decode_line(encode(record)[:-1], number) == record


def test_first_record_chains_from_sixty_four_zeros() -> None:
    assert TWENTY[0].prev == "0" * 64 == GENESIS_PREV
    assert all(b.prev == a.sha256 for a, b in itertools.pairwise(TWENTY))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"", "empty line at line 7"),
        (b"\n", "empty line at line 7"),
        (b"\xef\xbb\xbf{}", "byte order mark at line 7"),
        (b'{"a":"\x00"}', "NUL byte at line 7"),
        (b'{"a":"\xe2\x80\xa8"}', "non-ASCII byte at line 7"),
        (b"{", "invalid JSON at line 7"),
        (b"{}{}", "invalid JSON at line 7"),
        (b'{"a":NaN}', "invalid JSON at line 7"),
        (b'{"a":Infinity}', "invalid JSON at line 7"),
        (b"[" * 100_000, "invalid JSON at line 7"),
        (b"[]", "not a JSON object at line 7"),
        (b'"text"', "not a JSON object at line 7"),
        (b'{"a":1,"a":2}', "duplicate key 'a' at line 7"),
    ],
)
def test_malformed_lines_name_the_fault_and_line(line: bytes, message: str) -> None:
    fails(line, message, line_no=7)


def test_missing_and_unexpected_fields() -> None:
    obj = as_object(TWENTY[0])
    for key in sorted(RECORD_FIELDS):
        partial = {k: v for k, v in obj.items() if k != key}
        fails(canonical(partial), f"missing field '{key}' at line 1")
    fails(canonical({**obj, "zzz": 1}), "unexpected field 'zzz' at line 1")
    claim = dict(obj["claim"])  # type: ignore[call-overload]
    del claim["retain_until"]
    fails(
        rehashed({**obj, "claim": claim}),
        "missing field 'claim.retain_until' at line 1",
    )
    fails(
        rehashed({**obj, "claim": {**claim, "retain_until": None, "extra": 1}}),
        "unexpected field 'claim.extra' at line 1",
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("sequence", 0, "invalid field 'sequence'"),
        ("sequence", True, "invalid field 'sequence'"),
        ("sequence", 1.0, "invalid field 'sequence'"),
        ("sequence", "1", "invalid field 'sequence'"),
        ("position", 0, "invalid field 'position'"),
        ("position", -3, "invalid field 'position'"),
        ("prev", "0" * 63, "invalid field 'prev'"),
        ("prev", "A" * 64, "invalid field 'prev'"),
        ("session_id", "", "invalid field 'session_id'"),
        ("session_id", None, "invalid field 'session_id'"),
        ("transaction_id", 7, "invalid field 'transaction_id'"),
        ("phase", "PREPARED", "invalid field 'phase'"),
        ("phase", None, "invalid field 'phase'"),
        ("at", "yesterday", "invalid field 'at'"),
        ("at", "2026-01-01T00:00:00", "invalid field 'at'"),
        ("claim", None, "invalid field 'claim'"),
        ("claim", [], "invalid field 'claim'"),
    ],
)
def test_wrongly_typed_fields_are_rejected(
    key: str, value: object, message: str
) -> None:
    obj = as_object(TWENTY[0])  # a prepared record
    fails(rehashed({**obj, key: value}), f"{message} at line 1: ")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("reference_count", 0),
        ("reference_count", False),
        ("content_sha256", "abc"),
        ("source_id", ""),
        ("retain_until", "soon"),
        ("retain_until", 5),
    ],
)
def test_wrongly_typed_claim_fields_are_rejected(key: str, value: object) -> None:
    obj = as_object(TWENTY[0])
    claim = {**obj["claim"], key: value}  # type: ignore[dict-item]
    fails(rehashed({**obj, "claim": claim}), f"invalid field 'claim.{key}' at line 1")


def test_a_claim_on_a_later_phase_is_rejected() -> None:
    committed = as_object(TWENTY[2])
    assert committed["phase"] == "committed"
    fails(
        rehashed({**committed, "claim": claim_for("tx-0")}),
        "invalid field 'claim' at line 1: must be null on a committed record",
    )


@pytest.mark.parametrize(
    ("rewrite", "message"),
    [
        (lambda line: line.replace(b",", b", ", 1), "not canonical"),
        (lambda line: line.replace(b":", b": ", 1), "not canonical"),
        (lambda line: b" " + line, "not canonical"),
        (lambda line: line + b" ", "not canonical"),
        (lambda line: line + b"\r", "not canonical"),
        (lambda line: line.replace(b'"at"', b'"\\u0061t"'), "not canonical"),
        (lambda line: line.replace(b"tx-0", b"tx\\u002d0"), "not canonical"),
        (lambda line: line.replace(b"tx-0", b"\\u0074x-0"), "not canonical"),
        (
            lambda line: b'{"sequence":1,' + line[1:].replace(b',"sequence":1', b""),
            "not canonical",
        ),
        (
            lambda line: line.replace(b'"position":3', b'"position":3.0'),
            "invalid field 'position'",
        ),
        (
            lambda line: line.replace(b'"position":3', b'"position":3e0'),
            "invalid field 'position'",
        ),
    ],
)
def test_differently_spelt_lines_are_refused(
    rewrite: Callable[[bytes], bytes], message: str
) -> None:
    line = encode(TWENTY[0])[:-1]
    changed = rewrite(line)
    assert changed != line
    assert json.loads(changed) == json.loads(line)
    fails(changed, f"{message} at line 1")


def test_a_malformed_hash_is_rejected() -> None:
    obj = as_object(TWENTY[0])
    for value in ("f" * 65, "F" * 64, 5, None):
        fails(canonical({**obj, "sha256": value}), "invalid field 'sha256' at line 1")


def test_an_edited_field_is_a_hash_mismatch() -> None:
    obj = as_object(TWENTY[1])
    fails(canonical({**obj, "position": 999}), "hash mismatch at line 1")
    fails(canonical({**obj, "sha256": "0" * 64}), "hash mismatch at line 1")


def test_decode_line_at_names_the_offset() -> None:
    with raises("invalid JSON at offset 1234", whole=True):
        decode_line_at(b"{", offset=1234)
    assert decode_line_at(encode(TWENTY[3]), offset=0) == TWENTY[3]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"phase": "bogus"}, "invalid field 'phase' in a new journal record"),
        ({"phase": "committed"}, "invalid field 'claim' in a new journal record"),
        ({"claim": None}, "invalid field 'claim' in a new journal record"),
        ({"sequence": 0}, "invalid field 'sequence' in a new journal record"),
        ({"position": True}, "invalid field 'position' in a new journal record"),
        ({"prev": "x"}, "invalid field 'prev' in a new journal record"),
        ({"at": "2026-01-01"}, "invalid field 'at' in a new journal record"),
        (
            {"claim": {"source_id": "a"}},
            "missing field 'claim.content_sha256' in a new",
        ),
    ],
)
def test_make_record_refuses_what_decode_would_refuse(
    changes: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {
        "sequence": 1,
        "prev": GENESIS_PREV,
        "position": 1,
        "session_id": SESSION,
        "transaction_id": "tx",
        "phase": "prepared",
        "claim": claim_for("tx"),
        "at": "2026-01-01T00:00:00+00:00",
    }
    with raises(message):
        make_record(**{**fields, **changes})  # type: ignore[arg-type]


def test_make_record_copies_the_claim() -> None:
    claim = claim_for("tx")
    record = make_record(
        sequence=1,
        prev=GENESIS_PREV,
        position=1,
        session_id=SESSION,
        transaction_id="tx",
        phase="prepared",
        claim=claim,
        at="2026-01-01T00:00:00+00:00",
    )
    claim["reference_count"] = 99
    assert record.claim is not None
    assert record.claim["reference_count"] == 2
    assert decode_line(encode(record), 1) == record


# separators inside strings (J1) ---------------------------------------------


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85", "\n", "\r", '"', "\\"])
def test_line_separators_inside_strings_are_data(char: str) -> None:
    session = f"session{char}a"
    tx = f"tx{char}1"
    records = build([(tx, "prepared"), (tx, "committed")], session_id=session)
    data = journal_bytes(records)
    assert data.isascii()
    assert data.count(b"\n") == 2
    assert verify(data, session) == (records, b"")
    assert records[0].claim is not None
    assert char in str(records[0].claim["source_id"])


def test_raw_line_separator_bytes_are_not_ascii() -> None:
    line = encode(build([("tx\u2028", "prepared")])[0])[:-1]
    assert b"\\u2028" in line
    fails(line.replace(b"\\u2028", "\u2028".encode()), "non-ASCII byte at line 1")


# splitting and torn tails (J5) ---------------------------------------------


def test_split_reports_offsets_from_the_start_offset() -> None:
    data = journal_bytes(TWENTY[:3])
    split = split_journal(data + b'{"torn', start_offset=100)
    ends = [100 + len(journal_bytes(TWENTY[:n])) for n in range(4)]
    assert [offset for offset, _ in split.lines] == ends[:3]
    assert [line + b"\n" for _, line in split.lines] == [encode(r) for r in TWENTY[:3]]
    assert split.complete_end == ends[3]
    assert split.torn == b'{"torn'
    assert split_journal(b"", start_offset=5) == ([], 5, b"")
    assert split_journal(b"abc", start_offset=5) == ([], 5, b"abc")


def test_every_truncation_of_a_twenty_record_journal() -> None:
    data = journal_bytes(TWENTY)
    line_ends = {len(journal_bytes(TWENTY[:n])) for n in range(21)}
    for cut in range(len(data) + 1):
        records, torn = verify(data[:cut])
        kept = len(records)
        end = len(journal_bytes(TWENTY[:kept]))
        assert records == TWENTY[:kept]
        assert end + len(torn) == cut
        if cut in line_ends:
            assert torn == b"", cut
            assert end == cut
        else:
            assert torn == encode(TWENTY[kept])[: cut - end], cut


def test_every_single_byte_flip_of_a_five_record_journal() -> None:
    data = journal_bytes(FIVE)
    final = len(data) - 1
    for index in range(len(data)):
        for mask in (0x01, 0x20, 0x80, 0xFF):
            flipped = bytearray(data)
            flipped[index] ^= mask
            if index == final:
                # The last newline gone: the last record is a torn append.
                records, torn = verify(bytes(flipped))
                assert records == FIVE[:4]
                assert torn == bytes(flipped[len(journal_bytes(FIVE[:4])) :])
                continue
            with pytest.raises(ArtifactLeaseJournalError, match=r" at line [1-5]"):
                verify(bytes(flipped))


def test_crlf_line_endings_are_not_canonical() -> None:
    data = journal_bytes(FIVE).replace(b"\n", b"\r\n")
    with raises("not canonical at line 1", whole=True):
        verify(data)


def test_a_utf8_bom_is_invalid() -> None:
    with raises("byte order mark at line 1", whole=True):
        verify(b"\xef\xbb\xbf" + journal_bytes(FIVE))


def test_a_nul_run_at_the_end_is_a_torn_append() -> None:
    data = journal_bytes(FIVE) + b"\x00" * 4096
    assert verify(data) == (FIVE, b"\x00" * 4096)


def test_a_nul_run_in_the_middle_is_an_error() -> None:
    data = journal_bytes(FIVE[:2]) + b"\x00" * 64 + journal_bytes(FIVE[2:])
    with raises("NUL byte at line 3", whole=True):
        verify(data)
    data = journal_bytes(FIVE[:2]) + b"\x00" * 64 + b"\n" + journal_bytes(FIVE[2:])
    with raises("NUL byte at line 3", whole=True):
        verify(data)


def test_valid_json_without_the_final_newline_is_torn() -> None:
    data = journal_bytes(FIVE)[:-1]
    assert verify(data) == (FIVE[:4], encode(FIVE[4])[:-1])


def test_an_empty_line_among_complete_lines_is_an_error() -> None:
    data = journal_bytes(FIVE[:2]) + b"\n" + journal_bytes(FIVE[2:])
    with raises("empty line at line 3", whole=True):
        verify(data)


# the chain ------------------------------------------------------------------


def test_a_duplicated_record() -> None:
    data = journal_bytes([*FIVE[:3], FIVE[2], *FIVE[3:]])
    with raises("duplicate sequence at line 4"):
        verify(data)


def test_swapped_records() -> None:
    data = journal_bytes([FIVE[0], FIVE[2], FIVE[1], *FIVE[3:]])
    with raises("sequence gap at line 2"):
        verify(data)


def test_a_gap() -> None:
    data = journal_bytes([*FIVE[:2], *FIVE[3:]])
    with raises("sequence gap at line 3: expected 3, found 4"):
        verify(data)


def test_a_record_of_another_session() -> None:
    """Even correctly chained, a record naming another session is refused."""
    steps = legal_steps(5)
    head = build(steps[:2])
    foreign = build(
        [steps[2]], session_id="session-b", first_sequence=3, prev=head[-1].sha256
    )
    tail = build(steps[3:], first_sequence=4, prev=foreign[0].sha256)
    with raises("foreign session at line 3"):
        verify(journal_bytes([*head, *foreign, *tail]))


def edited(record: JournalRecord, prev: str | None = None) -> JournalRecord:
    """`record` with a new timestamp (and optionally a new prev), rehashed."""
    return make_record(
        sequence=record.sequence,
        prev=record.prev if prev is None else prev,
        position=record.position,
        session_id=record.session_id,
        transaction_id=record.transaction_id,
        phase=record.phase,
        claim=record.claim,
        at="2030-06-06T06:06:06+00:00",
    )


def test_a_rechained_record_breaks_the_next_link() -> None:
    """A record edited and rehashed passes itself; the next record's prev breaks."""
    forged = edited(FIVE[2])
    assert decode_line(encode(forged), 3) == forged
    with raises("broken chain at line 4"):
        verify(journal_bytes([*FIVE[:2], forged, *FIVE[3:]]))


def test_an_edit_rechained_to_the_end_passes_the_chain_alone() -> None:
    """An edit with every later record re-chained is self-consistent.

    Only comparing each record with the stored event at its position (the
    projection's job, J5) catches it; the codec and the chain cannot.
    """
    forged = [*FIVE[:2]]
    for record in FIVE[2:]:
        forged.append(edited(record, prev=forged[-1].sha256))
    records, torn = verify(journal_bytes(forged))
    assert (records, torn) == (forged, b"")
    assert [r.sha256 for r in records[2:]] != [r.sha256 for r in FIVE[2:]]


def test_positions_must_increase_but_may_skip() -> None:
    steps = legal_steps(4)
    assert verify(journal_bytes(build(steps, positions=[1, 2, 50, 51])))[1] == b""
    with raises("position out of order at line 3: 7 after 7"):
        verify(journal_bytes(build(steps, positions=[1, 7, 7, 9])))
    with raises("position out of order at line 4"):
        verify(journal_bytes(build(steps, positions=[1, 7, 9, 3])))


@pytest.mark.parametrize(
    ("steps", "line"),
    [
        ([("a", "committed")], 1),
        ([("a", "released")], 1),
        ([("a", "prepared"), ("a", "released")], 2),
        ([("a", "prepared"), ("a", "prepared")], 2),
        ([("a", "prepared"), ("a", "committed"), ("a", "prepared")], 3),
        ([("a", "prepared"), ("a", "committed"), ("a", "aborted")], 3),
        ([("a", "prepared"), ("a", "aborted"), ("a", "committed")], 3),
        (
            [
                ("a", "prepared"),
                ("a", "committed"),
                ("a", "released"),
                ("a", "released"),
            ],
            4,
        ),
    ],
)
def test_illegal_transitions(steps: list[tuple[str, str]], line: int) -> None:
    with raises(f"illegal transition at line {line}: "):
        verify(journal_bytes(build(steps)))


def test_a_refused_record_leaves_the_chain_unchanged() -> None:
    chain = JournalChain(session_id=SESSION)
    chain.accept(FIVE[0])
    with raises("sequence gap at line 2"):
        chain.accept(FIVE[2])
    assert (chain.next_line, chain.last_sequence, chain.last_sha256) == (
        2,
        1,
        FIVE[0].sha256,
    )
    assert chain.accept(FIVE[1]) == FIVE[1]
    assert chain.last_position == FIVE[1].position


def test_a_chain_resumes_from_a_checkpoint() -> None:
    split = split_journal(journal_bytes(TWENTY))
    chain = JournalChain(
        session_id=SESSION,
        last_sequence=12,
        last_sha256=TWENTY[11].sha256,
        last_position=TWENTY[11].position,
    )
    assert chain.next_line == 13
    assert not chain.phases_known
    assert [chain.accept_line(line) for _, line in split.lines[12:]] == TWENTY[12:]
    wrong = JournalChain(
        session_id=SESSION, last_sequence=12, last_sha256=TWENTY[10].sha256
    )
    with raises("broken chain at line 13"):
        wrong.accept_line(split.lines[12][1])


def test_a_resumed_chain_without_phases_checks_only_what_it_has_seen() -> None:
    """Unknown phases: a transaction first seen after the checkpoint is not judged."""
    before = build([("a", "prepared"), ("b", "prepared")])
    after = build(
        [("b", "committed"), ("b", "released"), ("b", "committed")],
        first_sequence=3,
        prev=before[-1].sha256,
    )
    chain = JournalChain(
        session_id=SESSION,
        last_sequence=2,
        last_sha256=before[-1].sha256,
        last_position=6,
    )
    chain.accept(after[0])
    chain.accept(after[1])
    assert chain.phases == {"b": "released"}
    with raises("illegal transition at line 5"):
        chain.accept(after[2])


def test_a_resumed_chain_with_known_phases_checks_every_record() -> None:
    before = build([("a", "prepared"), ("a", "aborted")])
    after = build([("a", "committed")], first_sequence=3, prev=before[-1].sha256)
    orphan = build([("z", "committed")], first_sequence=3, prev=before[-1].sha256)
    chain_args = {
        "session_id": SESSION,
        "last_sequence": 2,
        "last_sha256": before[-1].sha256,
        "last_position": 6,
        "phases": {"a": "aborted"},
    }
    with raises("illegal transition at line 3"):
        JournalChain(**chain_args).accept(after[0])  # type: ignore[arg-type]
    with raises("illegal transition at line 3"):
        JournalChain(**chain_args).accept(orphan[0])  # type: ignore[arg-type]


def test_line_numbers_follow_next_line_not_the_sequence() -> None:
    chain = JournalChain(session_id=SESSION, next_line=40)
    with raises("sequence gap at line 40"):
        chain.accept(FIVE[1])
    with raises("hash mismatch at line 40"):
        chain.accept_line(canonical({**as_object(FIVE[0]), "position": 2}))


# properties -----------------------------------------------------------------

TEXT = st.text(
    alphabet=st.one_of(st.characters(), st.sampled_from('\u2028\u2029\x85\n\r"\\\x00')),
    min_size=1,
    max_size=12,
)
TIMES = st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat)


@st.composite
def legal_histories(draw: st.DrawFn) -> list[JournalRecord]:
    session_id = draw(TEXT)
    transaction_ids = draw(st.lists(TEXT, min_size=1, max_size=5, unique=True))
    pending = {
        tx: list(draw(st.sampled_from(LIFECYCLES))[: draw(st.integers(1, 3))])
        for tx in transaction_ids
    }
    records: list[JournalRecord] = []
    prev, position = GENESIS_PREV, 0
    while pending:
        tx = draw(st.sampled_from(sorted(pending)))
        phase = pending[tx].pop(0)
        if not pending[tx]:
            del pending[tx]
        position += draw(st.integers(1, 10**12))
        claim = None
        if phase == "prepared":
            claim = {
                "source_id": draw(TEXT),
                "content_sha256": hashlib.sha256(draw(st.binary())).hexdigest(),
                "reference_count": draw(st.integers(1, 10**6)),
                "retain_until": draw(st.one_of(st.none(), TIMES)),
            }
        record = make_record(
            sequence=len(records) + 1,
            prev=prev,
            position=position,
            session_id=session_id,
            transaction_id=tx,
            phase=phase,
            claim=claim,
            at=draw(TIMES),
        )
        records.append(record)
        prev = record.sha256
    return records


@given(legal_histories())
def test_legal_histories_round_trip_and_verify(records: list[JournalRecord]) -> None:
    data = journal_bytes(records)
    assert data.isascii()
    assert data.count(b"\n") == len(records)
    assert verify(data, records[0].session_id) == (records, b"")
    # Encoding is deterministic: the same fields give the same bytes and hash.
    again = [
        make_record(
            sequence=r.sequence,
            prev=r.prev,
            position=r.position,
            session_id=r.session_id,
            transaction_id=r.transaction_id,
            phase=r.phase,
            claim=r.claim,
            at=r.at,
        )
        for r in records
    ]
    assert again == records
    assert journal_bytes(again) == data
    assert [encode(decode_line(encode(r), 1)) for r in records] == [
        encode(r) for r in records
    ]
    # The codec writes each field itself: it must be json.dumps' canonical form.
    for record in records:
        body = record.body()
        assert encode(record) == canonical({**body, "sha256": record.sha256}) + b"\n"
        assert record.sha256 == hashlib.sha256(canonical(body)).hexdigest()


@given(legal_histories(), st.data())
def test_any_cut_keeps_a_verifiable_prefix(
    records: list[JournalRecord], data: st.DataObject
) -> None:
    whole = journal_bytes(records)
    cut = data.draw(st.integers(0, len(whole)))
    kept, torn = verify(whole[:cut], records[0].session_id)
    assert kept == records[: len(kept)]
    assert journal_bytes(kept) + torn == whole[:cut]


# the projector ----------------------------------------------------------------


def event_of(record: JournalRecord) -> dict[str, object]:
    """The projector's arguments for the event `record` stands for."""
    return {
        "position": record.position,
        "transaction_id": record.transaction_id,
        "phase": record.phase,
        "claim": record.claim,
        "at": record.at,
    }


@given(legal_histories())
def test_the_projector_chains_what_make_record_chains(
    records: list[JournalRecord],
) -> None:
    lines = RecordProjector(records[0].session_id)
    built = RecordProjector(records[0].session_id)
    for record in records:
        assert lines.line(**event_of(record)) == encode(record)  # type: ignore[arg-type]
        assert built.record(**event_of(record)) == record  # type: ignore[arg-type]
        assert (lines.last_sequence, lines.last_sha256, lines.last_position) == (
            record.sequence,
            record.sha256,
            record.position,
        )


def test_a_projector_resumes_from_a_checkpoint() -> None:
    last = TWENTY[9]
    projector = RecordProjector(
        SESSION,
        last_sequence=last.sequence,
        last_sha256=last.sha256,
        last_position=last.position,
    )
    assert (
        [projector.line(**event_of(r)) for r in TWENTY[10:]]
        == [  # type: ignore[arg-type]
            encode(r) for r in TWENTY[10:]
        ]
    )


def test_the_projector_copies_the_claim_of_a_record() -> None:
    claim = claim_for("tx")
    record = RecordProjector(SESSION).record(
        position=1, transaction_id="tx", phase="prepared", claim=claim, at=AT
    )
    claim["reference_count"] = 99
    assert record.claim is not None
    assert record.claim["reference_count"] == 2


class Count(int):
    """An int subclass: make_record takes it, as JSON writes it, like an int."""


class Text(str):
    """A str subclass, likewise."""

    __slots__ = ()


AT = "2026-01-01T00:00:00+00:00"
EVENT: dict[str, object] = {
    "position": 1,
    "transaction_id": "tx",
    "phase": "prepared",
    "claim": claim_for("tx"),
    "at": AT,
}


@pytest.mark.parametrize(
    "changes",
    [
        {"position": Count(5)},
        {"transaction_id": Text("tx")},
        {"at": Text(AT)},
        {"claim": {**claim_for("tx"), "reference_count": Count(3)}},
        {"claim": {**claim_for("tx"), "source_id": Text("source")}},
        {"claim": {**claim_for("tx"), "retain_until": None}},
        {"phase": "committed", "claim": None},
    ],
)
def test_the_projector_takes_what_make_record_takes(changes: dict[str, object]) -> None:
    event = {**EVENT, **changes}
    line = RecordProjector(SESSION).line(**event)  # type: ignore[arg-type]
    record = make_record(sequence=1, prev=GENESIS_PREV, session_id=SESSION, **event)  # type: ignore[arg-type]
    assert line == encode(record)


BAD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from(["", "x", "prepared", "committed", "bogus", AT, "2026-01-01"]),
    st.just([]),
)
BAD_CLAIMS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {}, optional=dict.fromkeys(sorted(CLAIM_FIELDS | {"extra"}), BAD_VALUES)
    ),
)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "position": BAD_VALUES,
            "transaction_id": BAD_VALUES,
            "phase": BAD_VALUES,
            "at": BAD_VALUES,
            "claim": BAD_CLAIMS,
        },
    )
)
def test_the_projector_refuses_what_make_record_refuses(
    changes: dict[str, object],
) -> None:
    event = {**EVENT, **changes}
    projector = RecordProjector(SESSION)
    try:
        record = make_record(sequence=1, prev=GENESIS_PREV, session_id=SESSION, **event)  # type: ignore[arg-type]
    except ArtifactLeaseJournalError as error:
        with raises(str(error), whole=True):
            projector.line(**event)  # type: ignore[arg-type]
        # A refused event leaves the chain where it was.
        assert (projector.last_sequence, projector.last_sha256) == (0, GENESIS_PREV)
    else:
        assert projector.line(**event) == encode(record)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {"phase": "bogus"},
        {"phase": ["prepared"]},
        {"position": 0},
        {"position": True},
        {"transaction_id": ""},
        {"transaction_id": 7},
        {"at": ""},
        {"at": "later"},
        {"at": "2026-01-01"},
        {"claim": None},
        {"phase": "committed"},
        {"claim": {**claim_for("tx"), "retain_until": "later"}},
        {"claim": {**claim_for("tx"), "retain_until": "2026-01-01"}},
        {"claim": {**claim_for("tx"), "content_sha256": "F" * 64}},
        {"claim": {**claim_for("tx"), "reference_count": 0}},
        {"claim": {**claim_for("tx"), "source_id": ""}},
        {"claim": {**claim_for("tx"), "extra": 1}},
        {"position": 0, "at": "later"},
    ],
)
def test_the_projector_names_the_fault_make_record_names(
    changes: dict[str, object],
) -> None:
    event = {**EVENT, **changes}
    with pytest.raises(ArtifactLeaseJournalError) as refused:
        make_record(sequence=1, prev=GENESIS_PREV, session_id=SESSION, **event)  # type: ignore[arg-type]
    with raises(str(refused.value), whole=True):
        RecordProjector(SESSION).line(**event)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"claim": "text"}, "must be an object on a prepared record"),
        ({"claim": ["a"]}, "must be an object on a prepared record"),
        ({"phase": "committed", "claim": "text"}, "must be null on a committed"),
    ],
)
def test_the_projector_refuses_a_claim_json_would_not_give(
    changes: dict[str, object], message: str
) -> None:
    # JSON gives a claim as an object or null; make_record's callers pass a
    # mapping. Whatever else an event holds is refused, not converted.
    with raises(f"invalid field 'claim' in a new journal record: {message}"):
        RecordProjector(SESSION).line(**{**EVENT, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"session_id": ""}, "invalid field 'session_id' in a new journal record"),
        ({"last_sequence": -1}, "invalid field 'sequence' in a new journal record"),
        ({"last_sha256": "x"}, "invalid field 'prev' in a new journal record"),
        ({"last_position": -1}, "invalid field 'position' in a new journal record"),
    ],
)
def test_a_projector_refuses_a_bad_checkpoint(
    arguments: dict[str, object], message: str
) -> None:
    with raises(message):
        RecordProjector(**{"session_id": SESSION, **arguments})  # type: ignore[arg-type]
