"""The journal as a PostgreSQL table: the file's byte offsets, J3, J4, J7."""

from __future__ import annotations

import re
import threading
import time
import traceback
import uuid
from typing import TYPE_CHECKING, Any
from unittest import mock
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_journal_file import build, lines, verify

from spillvault.adapters.storage import journal_table
from spillvault.adapters.storage.journal_file import JournalTail
from spillvault.adapters.storage.journal_table import (
    APPLICATION_NAME,
    JOURNAL_TABLE,
    JournalTable,
)
from spillvault.adapters.storage.postgres_store import PostgresBackend, schema_for
from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.journal_records import encode

from support.pgserver import in_ci
from support.tiers import HANG_GUARD_SECONDS

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
except ImportError:  # the postgres extra is missing: an error in CI, else a skip
    if in_ci():
        raise
    pytest.skip(
        "needs the postgres extra: pip install 'spillvault[postgres]'",
        allow_module_level=True,
    )

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

KEPT = f"{JOURNAL_TABLE}_kept"
ASIDE = f"{JOURNAL_TABLE}_aside"
RECORDS = build(60)


# helpers -------------------------------------------------------------------


def query(dsn: str, statement: Any, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        cursor = connection.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def fresh_schema(dsn: str) -> str:
    schema = f"journal_test_{uuid.uuid4().hex}"
    query(dsn, sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    return schema


def drop_schema(dsn: str, schema: str) -> None:
    query(dsn, sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def in_schema(schema: str, table: str = JOURNAL_TABLE) -> sql.Identifier:
    return sql.Identifier(schema, table)


def rows_of(dsn: str, schema: str) -> list[tuple[int, bytes]]:
    statement = sql.SQL("SELECT start, line FROM {} ORDER BY start").format(
        in_schema(schema)
    )
    return [(int(start), bytes(line)) for start, line in query(dsn, statement)]


def tables_in(dsn: str, schema: str) -> set[str]:
    rows = query(
        dsn,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (schema,),
    )
    return {row[0] for row in rows}


def kept(dsn: str, schema: str) -> dict[str, tuple[int, bytes]]:
    """Every journal kept aside by a repair: its size and its bytes, by suffix."""
    sizes = query(
        dsn, sql.SQL("SELECT suffix, size FROM {}").format(in_schema(schema, KEPT))
    )
    found: dict[str, tuple[int, bytes]] = {}
    for suffix, size in sizes:
        data = query(
            dsn,
            sql.SQL("SELECT line FROM {} WHERE suffix = %s ORDER BY start").format(
                in_schema(schema, ASIDE)
            ),
            (suffix,),
        )
        found[suffix] = (int(size), b"".join(bytes(row[0]) for row in data))
    return found


def backend_pids(dsn: str) -> list[int]:
    rows = query(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
        (APPLICATION_NAME,),
    )
    return [int(row[0]) for row in rows]


def pid_of(journal: JournalTable) -> int:
    return journal._connect().info.backend_pid


def raises(message: str) -> pytest.RaisesExc[Exception]:
    return pytest.raises(ArtifactLeaseJournalError, match="^" + re.escape(message))


def trigger(dsn: str, schema: str, body: str, *, deferred: bool = False) -> None:
    """Run `body` (PL/pgSQL) on every insert into the journal's table."""
    function = sql.Identifier(schema, "journal_fault")
    query(
        dsn,
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        ).format(function)
        + sql.SQL(body)
        + sql.SQL(" RETURN NEW; END $$"),
    )
    kind = (
        "CONSTRAINT TRIGGER fault AFTER INSERT ON {} DEFERRABLE INITIALLY DEFERRED"
        if deferred
        else "TRIGGER fault BEFORE INSERT ON {}"
    )
    query(
        dsn,
        sql.SQL(f"CREATE {kind} FOR EACH ROW EXECUTE FUNCTION {{}}()").format(
            in_schema(schema), function
        ),
    )


def drop_trigger(dsn: str, schema: str) -> None:
    query(dsn, sql.SQL("DROP TRIGGER fault ON {}").format(in_schema(schema)))


@pytest.fixture
def schema(postgres_dsn: str) -> Iterator[str]:
    name = fresh_schema(postgres_dsn)
    yield name
    drop_schema(postgres_dsn, name)


@pytest.fixture
def journal(postgres_dsn: str, schema: str) -> Iterator[JournalTable]:
    with JournalTable(postgres_dsn, schema) as table:
        yield table


@pytest.fixture
def other(postgres_dsn: str, schema: str) -> Iterator[JournalTable]:
    """A second writer on the same schema (another process, in effect)."""
    with JournalTable(postgres_dsn, schema) as table:
        yield table


# reading -------------------------------------------------------------------


def test_a_missing_journal_reads_empty(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    assert journal.name == f"{schema}.{JOURNAL_TABLE}"
    assert not journal.exists()
    assert journal.read_from(0) == b""
    assert journal.read_from(5, limit=3) == b""
    assert journal.last_complete() == JournalTail(0, 0, None, None)
    assert tables_in(postgres_dsn, schema) == set()


def test_a_missing_schema_reads_empty(postgres_dsn: str) -> None:
    with JournalTable(postgres_dsn, f"absent_{uuid.uuid4().hex}") as journal:
        assert not journal.exists()
        assert journal.read_from(0) == b""
        assert journal.last_complete() == JournalTail(0, 0, None, None)
        with raises(f"schema {journal.name.split('.')[0]} does not exist"):
            journal.append(build(1), expect_end=0)
        with raises(f"schema {journal.name.split('.')[0]} does not exist"):
            journal.replace_with(build(1), keep_aside_suffix="x")
        assert not journal.poisoned


def test_appends_round_trip_the_encoded_bytes(
    journal: JournalTable, other: JournalTable, postgres_dsn: str, schema: str
) -> None:
    records = RECORDS[:6]
    end = journal.append(records[:4], expect_end=0)
    assert end == len(lines(records[:4]))
    end = journal.append(records[4:], expect_end=end)
    data = lines(records)
    assert end == len(data)
    assert journal.exists()
    assert journal.read_from(0) == data
    assert other.read_from(0) == data  # committed: another connection sees it
    assert verify(data) == (records, b"")
    # One row per line, keyed by the offset where the line starts.
    offset, expected = 0, []
    for record in records:
        expected.append((offset, encode(record)))
        offset += len(encode(record))
    assert rows_of(postgres_dsn, schema) == expected


def test_append_lines_writes_the_encoded_records_as_they_are(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    records = RECORDS[:5]
    end = journal.append_lines([encode(r) for r in records[:2]], expect_end=0)
    end = journal.append_lines([encode(r) for r in records[2:]], expect_end=end)
    assert journal.read_from(0) == lines(records)
    assert end == len(lines(records))
    assert [line for _, line in rows_of(postgres_dsn, schema)] == [
        encode(r) for r in records
    ]
    with pytest.raises(ValueError, match="at least one record"):
        journal.append_lines([], expect_end=end)


def test_read_from_an_offset_with_a_limit(journal: JournalTable) -> None:
    records = RECORDS[:4]
    end = journal.append(records, expect_end=0)
    data = lines(records)
    assert end == len(data)
    assert journal.read_from(0) == data
    assert journal.read_from(10) == data[10:]
    assert journal.read_from(10, limit=5) == data[10:15]
    first = len(encode(records[0]))
    assert journal.read_from(first - 1, limit=2) == data[first - 1 : first + 1]
    assert journal.read_from(first) == data[first:]
    assert journal.read_from(3, limit=0) == b""
    assert journal.read_from(len(data)) == b""
    assert journal.read_from(len(data) + 7) == b""
    assert journal.read_from(0, limit=10 * len(data)) == data
    with pytest.raises(ValueError, match="offset must be >= 0"):
        journal.read_from(-1)
    with pytest.raises(ValueError, match="limit must be >= 0"):
        journal.read_from(0, limit=-1)


def test_reads_page_through_the_lines(journal: JournalTable) -> None:
    journal.append(RECORDS, expect_end=0)
    data = lines(RECORDS)
    with mock.patch.object(journal_table, "PAGE_ROWS", 3):
        assert journal.read_from(0) == data
        assert journal.read_from(777) == data[777:]
        assert journal.read_from(777, limit=5000) == data[777:5777]
        assert journal.last_complete().last_record == RECORDS[-1]


@settings(max_examples=40)
@given(data=st.data(), page_rows=st.integers(1, 5))
def test_reads_match_the_bytes_of_the_appended_lines(
    postgres_dsn: str, data: st.DataObject, page_rows: int
) -> None:
    """Any interleaving of appends and reads: the table reads as its bytes would."""
    schema = fresh_schema(postgres_dsn)
    model = b""
    used = 0
    with (
        JournalTable(postgres_dsn, schema) as journal,
        mock.patch.object(journal_table, "PAGE_ROWS", page_rows),
    ):
        for _ in range(data.draw(st.integers(1, 8), label="steps")):
            if used < len(RECORDS) and data.draw(st.booleans(), label="append"):
                count = data.draw(st.integers(1, min(4, len(RECORDS) - used)))
                batch = RECORDS[used : used + count]
                end = journal.append(batch, expect_end=len(model))
                used += count
                model += lines(batch)
                assert end == len(model)
            else:
                offset = data.draw(st.integers(0, len(model) + 10), label="offset")
                limit = data.draw(
                    st.none() | st.integers(0, len(model) + 10), label="limit"
                )
                stop = None if limit is None else offset + limit
                assert journal.read_from(offset, limit=limit) == model[offset:stop]
        tail = journal.last_complete()
        assert (tail.size, tail.complete_end) == (len(model), len(model))
        assert tail.last_record == (RECORDS[used - 1] if used else None)
    drop_schema(postgres_dsn, schema)


# last_complete -------------------------------------------------------------


def test_last_complete_of_an_empty_and_a_written_journal(
    journal: JournalTable,
) -> None:
    assert journal.replace_with([], keep_aside_suffix="none") == 0
    assert journal.exists()
    assert journal.last_complete() == JournalTail(0, 0, None, None)
    records = RECORDS[:3]
    end = journal.append(records, expect_end=0)
    tail = journal.last_complete()
    assert tail == JournalTail(end, end, end - len(encode(records[-1])), records[-1])
    assert tail.torn_length == 0


def test_last_complete_names_the_offset_of_a_damaged_last_line(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    records = RECORDS[:3]
    journal.append(records, expect_end=0)
    start = len(lines(records[:2]))
    query(
        postgres_dsn,
        sql.SQL(
            "UPDATE {} SET line = convert_to("
            "replace(convert_from(line, 'UTF8'), '2026', '2027'), 'UTF8')"
            " WHERE start = %s"
        ).format(in_schema(schema)),
        (start,),
    )
    with raises(f"hash mismatch at offset {start}"):
        journal.last_complete()


def test_a_gap_or_an_overlap_between_rows_is_damage(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    records = RECORDS[:4]
    journal.append(records, expect_end=0)
    second = len(encode(records[0]))
    third = second + len(encode(records[1]))
    query(
        postgres_dsn,
        sql.SQL("DELETE FROM {} WHERE start = %s").format(in_schema(schema)),
        (second,),
    )
    message = f"{journal.name} is damaged: a line starts at offset {third}, "
    with raises(message + f"where offset {second} was expected"):
        journal.read_from(0)
    assert journal.read_from(third) == lines(records)[third:]
    query(
        postgres_dsn,
        sql.SQL("INSERT INTO {} (start, line) VALUES (%s, %s)").format(
            in_schema(schema)
        ),
        (second + 1, encode(records[1])),
    )
    with raises(f"{journal.name} is damaged: a line starts at offset {second + 1}"):
        journal.read_from(0)
    end = len(lines(records))
    query(
        postgres_dsn,
        sql.SQL("DELETE FROM {} WHERE start <> %s").format(in_schema(schema)),
        (end - len(encode(records[-1])),),
    )
    with raises(f"{journal.name} is damaged"):
        journal.last_complete()


def test_a_row_holds_exactly_one_line(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    journal.append(RECORDS[:1], expect_end=0)
    end = len(encode(RECORDS[0]))
    insert = sql.SQL("INSERT INTO {} (start, line) VALUES (%s, %s)").format(
        in_schema(schema)
    )
    for line in (b"", b"torn", b"two\nlines\n", b"\n\n"):
        with pytest.raises(psycopg.errors.CheckViolation):
            query(postgres_dsn, insert, (end, line))
    with pytest.raises(psycopg.errors.CheckViolation):
        query(postgres_dsn, insert, (-5, b"x\n"))


# appending (J3) --------------------------------------------------------------


def test_append_needs_records_and_a_sane_end(journal: JournalTable) -> None:
    with pytest.raises(ValueError, match="at least one record"):
        journal.append([], expect_end=0)
    with pytest.raises(ValueError, match="expect_end must be >= 0"):
        journal.append(build(1), expect_end=-1)
    assert not journal.exists()


def test_a_missing_journal_is_not_created_over_a_verified_end(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    with raises(f"{journal.name} is missing; expected 400 bytes: re-read it"):
        journal.append(build(1), expect_end=400)
    assert tables_in(postgres_dsn, schema) == set()
    assert not journal.poisoned


def test_a_shorter_journal_or_an_end_inside_a_line_is_refused(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    records = RECORDS[:3]
    end = journal.append(records[:2], expect_end=0)
    before = rows_of(postgres_dsn, schema)
    with raises(f"{journal.name} is shorter ({end} bytes) than its verified part"):
        journal.append([records[2]], expect_end=end + 1)
    with raises(f"offset {end - 1} is not the end of a line in {journal.name}"):
        journal.append([records[2]], expect_end=end - 1)
    with raises(f"{journal.name} has complete lines after offset 0"):
        journal.append([records[2]], expect_end=0)
    assert rows_of(postgres_dsn, schema) == before
    assert not journal.poisoned


def test_a_concurrent_append_is_detected(
    journal: JournalTable, other: JournalTable, postgres_dsn: str, schema: str
) -> None:
    records = RECORDS[:4]
    end = journal.append(records[:2], expect_end=0)
    # Another process appended record 3 (under the lock, but after our read).
    other.append([records[2]], expect_end=end)
    before = rows_of(postgres_dsn, schema)
    with raises(f"{journal.name} has complete lines after offset {end}"):
        journal.append([records[2]], expect_end=end)
    assert rows_of(postgres_dsn, schema) == before
    assert not journal.poisoned
    # Re-read, and carry on from the real end.
    tail = journal.last_complete()
    assert tail.last_record == records[2]
    journal.append([records[3]], expect_end=tail.complete_end)
    assert verify(journal.read_from(0)) == (records, b"")


def test_of_two_racing_appends_at_one_end_exactly_one_wins(
    journal: JournalTable, other: JournalTable, postgres_dsn: str, schema: str
) -> None:
    end = journal.append(RECORDS[:2], expect_end=0)
    ours, theirs = RECORDS[2:4], build(2, first=3, prev=RECORDS[1].sha256, tx_size=9)
    outcome: dict[str, object] = {}

    def run(name: str, table: JournalTable, batch: list[Any]) -> None:
        try:
            outcome[name] = table.append(batch, expect_end=end)
        except ArtifactLeaseJournalError as error:
            outcome[name] = error

    # Hold both writers at the table until both are waiting, then let them go.
    with psycopg.connect(postgres_dsn) as blocker:
        blocker.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(in_schema(schema))
        )
        workers = [
            threading.Thread(target=run, args=("ours", journal, ours)),
            threading.Thread(target=run, args=("theirs", other, theirs)),
        ]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + HANG_GUARD_SECONDS
        while len(waiting(postgres_dsn)) < 2:
            assert time.monotonic() < deadline, "the writers never blocked"
            time.sleep(0.01)
        blocker.commit()
    for worker in workers:
        worker.join(HANG_GUARD_SECONDS)
        assert not worker.is_alive()
    won = [name for name, result in outcome.items() if isinstance(result, int)]
    lost = [name for name, result in outcome.items() if name not in won]
    assert len(won) == 1, outcome
    assert len(lost) == 1, outcome
    assert re.match(
        f"^{re.escape(journal.name)} has complete lines after offset {end}",
        str(outcome[lost[0]]),
    )
    winner = ours if won[0] == "ours" else theirs
    assert journal.read_from(0) == lines(RECORDS[:2] + winner)
    assert not journal.poisoned
    assert not other.poisoned


def waiting(dsn: str) -> list[Any]:
    return query(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND wait_event_type = 'Lock'",
        (APPLICATION_NAME,),
    )


def test_the_tables_live_beside_the_event_store(postgres_dsn: str) -> None:
    store_id = uuid.uuid4()
    backend = PostgresBackend(postgres_dsn, store_id)
    backend.create()
    store = backend.open()
    try:
        with JournalTable(postgres_dsn, schema_for(store_id)) as journal:
            journal.append(RECORDS[:2], expect_end=0)
            assert journal.read_from(0) == lines(RECORDS[:2])
        tables = tables_in(postgres_dsn, schema_for(store_id))
        assert {JOURNAL_TABLE, KEPT, ASIDE} <= tables
        assert "spillvault_events" in tables
        assert not {JOURNAL_TABLE, KEPT, ASIDE} & tables_in(postgres_dsn, "public")
    finally:
        store.close()
        drop_schema(postgres_dsn, schema_for(store_id))


# repair (J7) -----------------------------------------------------------------


def test_repair_keeps_the_old_lines_aside(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    old = RECORDS[:5]
    end = journal.append(old, expect_end=0)
    new = build(3, tx_size=10)
    size = journal.replace_with(new, keep_aside_suffix="damaged-20260101")
    assert size == len(lines(new))
    assert journal.read_from(0) == lines(new)
    assert verify(journal.read_from(0)) == (new, b"")
    assert journal.last_complete().last_record == new[-1]
    assert kept(postgres_dsn, schema) == {"damaged-20260101": (end, lines(old))}
    # A reused suffix is refused and changes nothing.
    with raises(f"{journal.name}.damaged-20260101 already exists: choose another"):
        journal.replace_with(old, keep_aside_suffix="damaged-20260101")
    assert journal.read_from(0) == lines(new)
    assert not journal.poisoned
    assert journal.replace_with([], keep_aside_suffix="emptied") == 0
    assert journal.exists()
    assert journal.read_from(0) == b""
    assert kept(postgres_dsn, schema) == {
        "damaged-20260101": (end, lines(old)),
        "emptied": (size, lines(new)),
    }
    # An empty journal kept aside still takes its suffix.
    journal.replace_with(new, keep_aside_suffix="empty-one")
    with raises(f"{journal.name}.empty-one already exists"):
        journal.replace_with(new, keep_aside_suffix="empty-one")
    assert kept(postgres_dsn, schema)["empty-one"] == (0, b"")


def test_repair_of_a_missing_journal_just_writes_it(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    records = RECORDS[:2]
    assert journal.replace_with(records, keep_aside_suffix="none") == len(
        lines(records)
    )
    assert journal.read_from(0) == lines(records)
    assert kept(postgres_dsn, schema) == {}
    journal.append(RECORDS[2:3], expect_end=len(lines(records)))
    assert journal.read_from(0) == lines(RECORDS[:3])


@pytest.mark.parametrize("suffix", ["", ".hidden", "a/b", "a\x00", "x" * 129, "é"])
def test_repair_suffixes_are_plain_names(journal: JournalTable, suffix: str) -> None:
    with pytest.raises(ValueError, match="keep_aside_suffix must be"):
        journal.replace_with(build(1), keep_aside_suffix=suffix)


def test_a_reader_sees_the_journal_before_or_after_a_repair_never_a_mix(
    journal: JournalTable, other: JournalTable
) -> None:
    old = RECORDS[:8]
    journal.append(old, expect_end=0)
    new = build(8, tx_size=12)
    pages = 0
    real_execute = psycopg.Connection.execute

    def execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kw: Any):
        nonlocal pages
        cursor = real_execute(self, query, *args, **kw)
        if self is journal._connection and query is journal._sql.page:
            pages += 1
            if pages == 1:  # a repair commits between the reader's pages
                other.replace_with(new, keep_aside_suffix="meanwhile")
        return cursor

    with (
        mock.patch.object(journal_table, "PAGE_ROWS", 2),
        mock.patch.object(psycopg.Connection, "execute", execute),
    ):
        seen = journal.read_from(0)
    assert pages > 1
    assert seen == lines(old)
    assert journal.read_from(0) == lines(new)


# poisoning (J4) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "deferred", "message"),
    [
        ("RAISE EXCEPTION 'disk on fire';", False, "disk on fire"),
        ("RAISE EXCEPTION 'commit refused';", True, "commit refused"),
        (
            "PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5);",
            False,
            "",
        ),
    ],
    ids=["insert", "commit", "connection-lost"],
)
def test_a_write_error_poisons_the_writer_for_good(
    journal: JournalTable,
    postgres_dsn: str,
    schema: str,
    fault: str,
    *,
    deferred: bool,
    message: str,
) -> None:
    records = RECORDS[:4]
    end = journal.append(records[:2], expect_end=0)
    trigger(postgres_dsn, schema, fault, deferred=deferred)
    with raises(f"journal writer poisoned: {message}") as caught:
        journal.append([records[2]], expect_end=end)
    assert journal.poisoned
    assert journal.describe() in str(caught.value)
    drop_trigger(postgres_dsn, schema)
    for _ in range(3):
        with raises("journal writer poisoned"):
            journal.append([records[2]], expect_end=end)
    with raises("journal writer poisoned"):
        journal.replace_with(records, keep_aside_suffix="x")
    # Nothing landed, and reading is not writing: the journal can still be read.
    assert len(rows_of(postgres_dsn, schema)) == 2
    assert journal.read_from(0) == lines(records[:2])
    assert journal.last_complete().complete_end == end
    # Another writer (another process) carries on.
    with JournalTable(postgres_dsn, schema) as fresh:
        assert fresh.append([records[2]], expect_end=end) > end


def test_a_failed_repair_poisons_and_keeps_the_journal(
    journal: JournalTable, postgres_dsn: str, schema: str
) -> None:
    journal.append(RECORDS[:2], expect_end=0)
    trigger(postgres_dsn, schema, "RAISE EXCEPTION 'no space';")
    with raises("journal writer poisoned: no space"):
        journal.replace_with(RECORDS[:3], keep_aside_suffix="damaged")
    assert journal.read_from(0) == lines(RECORDS[:2])
    assert kept(postgres_dsn, schema) == {}
    with raises("journal writer poisoned"):
        journal.append(RECORDS[2:3], expect_end=len(lines(RECORDS[:2])))


def test_a_connection_lost_while_idle_is_reopened_without_poison(
    journal: JournalTable, postgres_dsn: str
) -> None:
    end = journal.append(RECORDS[:2], expect_end=0)
    for kill_before in ("read", "append"):
        pid = pid_of(journal)
        query(postgres_dsn, "SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + HANG_GUARD_SECONDS
        while pid in backend_pids(postgres_dsn):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        if kill_before == "read":
            assert journal.read_from(0) == lines(RECORDS[:2])
        else:
            end = journal.append(RECORDS[2:3], expect_end=end)
        assert pid_of(journal) != pid
    assert not journal.poisoned
    assert journal.read_from(0) == lines(RECORDS[:3])


def test_close_is_idempotent_and_a_later_call_reconnects(
    journal: JournalTable, postgres_dsn: str
) -> None:
    journal.append(RECORDS[:1], expect_end=0)
    pid = pid_of(journal)
    journal.close()
    journal.close()
    assert journal._connection is None
    assert journal.read_from(0) == lines(RECORDS[:1])
    assert pid_of(journal) != pid
    journal.close()


# errors --------------------------------------------------------------------


def test_errors_name_the_server_but_never_the_password(postgres_dsn: str) -> None:
    parts = conninfo_to_dict(postgres_dsn)
    secret = "s3cret-" + uuid.uuid4().hex
    dsn = (
        f"postgresql://nobody:{quote(secret, safe='')}@/{parts['dbname']}"
        f"?host={quote(str(parts['host']), safe='/')}&port={parts['port']}"
    )
    journal = JournalTable(dsn, "some_schema")
    for call in (
        lambda: journal.read_from(0),
        lambda: journal.append(build(1), expect_end=0),
        journal.exists,
    ):
        with raises("PostgreSQL journal unavailable (postgresql://nobody@") as caught:
            call()
        assert "schema some_schema" in str(caught.value)
        assert secret not in "".join(traceback.format_exception(caught.value))
    assert not journal.poisoned
    journal.close()


def test_a_writer_waiting_past_the_timeout_fails_without_poison(
    postgres_dsn: str, schema: str
) -> None:
    with JournalTable(postgres_dsn, schema, statement_timeout=0.2) as journal:
        end = journal.append(RECORDS[:1], expect_end=0)
        with psycopg.connect(postgres_dsn) as blocker:
            blocker.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                (journal_table._LOCK_CLASS, journal.name),
            )
            started = time.monotonic()
            with raises(f"cannot lock {journal.name}"):
                journal.append(RECORDS[1:2], expect_end=end)
            assert time.monotonic() - started < HANG_GUARD_SECONDS
        assert not journal.poisoned
        assert journal.append(RECORDS[1:2], expect_end=end) > end
