"""The journal file (S4.5, J3-J7, A4): torn tails, poisoning, symlinks, repair."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.storage.fs import OsFileSystem
from spillvault.adapters.storage.journal_file import (
    TAIL_BLOCK,
    JournalFile,
    JournalTail,
)
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.journal_records import (
    GENESIS_PREV,
    JournalChain,
    JournalRecord,
    encode,
    make_record,
    split_journal,
)

from support.intercept import InterceptingFS, named
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from support.intercept import Call

SESSION = "session-a"
NAME = RETENTION_JOURNAL_NAME


def build(count: int, *, first: int = 1, prev: str = GENESIS_PREV, tx_size: int = 8):
    """`count` legal records: each transaction prepared, then committed."""
    records: list[JournalRecord] = []
    for sequence in range(first, first + count):
        number = (sequence + 1) // 2
        digest = hashlib.sha256(str(number).encode()).hexdigest()
        prepared = sequence % 2 == 1
        record = make_record(
            sequence=sequence,
            prev=prev,
            position=2 * sequence,
            session_id=SESSION,
            transaction_id=f"tx-{number:0{tx_size}d}",
            phase="prepared" if prepared else "committed",
            claim={
                "source_id": f"artifact:{SESSION}:tool_result_001.txt:{digest[:12]}",
                "content_sha256": digest,
                "reference_count": 1,
                "retain_until": None,
            }
            if prepared
            else None,
            at="2026-01-01T00:00:00+00:00",
        )
        records.append(record)
        prev = record.sha256
    return records


def lines(records: list[JournalRecord]) -> bytes:
    return b"".join(encode(record) for record in records)


def verify(data: bytes) -> tuple[list[JournalRecord], bytes]:
    split = split_journal(data)
    chain = JournalChain(session_id=SESSION)
    return [chain.accept_line(line) for _, line in split.lines], split.torn


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def faulty() -> InterceptingFS:
    """The real seam, recording the calls a fault may be injected into."""
    return InterceptingFS(record={"write", "fsync", "ftruncate", "pread"})


def at_eof(call: Call, pread: Callable[..., bytes]) -> bytes:
    """Read nothing, as if the file had been cut while we read it."""
    return b""


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    yield fd
    os.close(fd)


@pytest.fixture
def journal(dir_fd: int) -> JournalFile:
    return JournalFile(OsFileSystem(), dir_fd)


def raises(message: str) -> pytest.RaisesExc[Exception]:
    return pytest.raises(ArtifactLeaseJournalError, match="^" + re.escape(message))


# reading (A4) ----------------------------------------------------------------


def test_a_missing_journal_reads_empty(journal: JournalFile, tmp_path: Path) -> None:
    assert journal.name == NAME
    assert not journal.exists()
    assert journal.read_from(0) == b""
    assert journal.last_complete() == JournalTail(0, 0, None, None)
    assert not (tmp_path / NAME).exists()


def test_read_from_an_offset_with_a_limit(journal: JournalFile) -> None:
    records = build(4)
    end = journal.append(records, expect_end=0)
    data = lines(records)
    assert end == len(data)
    assert journal.exists()
    assert journal.read_from(0) == data
    assert journal.read_from(10) == data[10:]
    assert journal.read_from(10, limit=5) == data[10:15]
    assert journal.read_from(len(data) + 7) == b""
    with pytest.raises(ValueError, match="offset must be >= 0"):
        journal.read_from(-1)
    with pytest.raises(ValueError, match="limit must be >= 0"):
        journal.read_from(0, limit=-1)


def test_a_group_readable_journal_is_refused(
    journal: JournalFile, tmp_path: Path
) -> None:
    journal.append(build(1), expect_end=0)
    (tmp_path / NAME).chmod(0o640)
    with raises(f"{NAME} is open to group or others"):
        journal.read_from(0)
    with raises(f"{NAME} is open to group or others"):
        journal.last_complete()
    with raises(f"{NAME} is open to group or others"):
        journal.append(build(1, first=2), expect_end=len(lines(build(1))))


def test_a_fifo_at_the_name_is_refused_without_blocking(
    journal: JournalFile, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / NAME, 0o600)
    started = time.monotonic()
    with raises(f"{NAME} is not a regular file"):
        journal.read_from(0)
    with raises(f"{NAME} is not a regular file"):
        journal.append(build(1), expect_end=0)
    assert time.monotonic() - started < HANG_GUARD_SECONDS  # a blocked open hangs


def test_a_socket_at_the_name_is_refused(journal: JournalFile, tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / NAME))
        with raises(f"cannot open {NAME}: "):
            journal.read_from(0)
        with raises(f"cannot open {NAME}: "):
            journal.append(build(1), expect_end=0)


@pytest.mark.parametrize(
    ("failing", "message"),
    [("pread", "cannot read"), ("pread_eof", f"{NAME} ended at offset 0 while")],
)
def test_read_errors_are_journal_errors(
    dir_fd: int, failing: str, message: str
) -> None:
    fs = faulty()
    journal = JournalFile(fs, dir_fd)
    journal.append(build(2), expect_end=0)
    if failing == "pread":
        fs.fail("pread")
    else:
        fs.around("pread", at_eof)
    with raises(message):
        journal.read_from(0)
    with raises(message):
        journal.last_complete()
    assert not journal.poisoned


# symlinks --------------------------------------------------------------------


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlink_at_the_name_is_refused_and_nothing_goes_through_it(
    journal: JournalFile, tmp_path: Path, *, dangling: bool
) -> None:
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    if not dangling:
        victim.write_bytes(b"precious\n")
        victim.chmod(0o600)
    (tmp_path / NAME).symlink_to(victim)
    with raises(f"{NAME} is a symlink"):
        journal.read_from(0)
    with raises(f"{NAME} is a symlink"):
        journal.last_complete()
    with raises(f"{NAME} is a symlink"):
        journal.append(build(2), expect_end=0)
    with raises(f"{NAME} is a symlink"):
        journal.replace_with(build(2), keep_aside_suffix="damaged")
    assert (tmp_path / NAME).is_symlink()
    if dangling:
        assert not victim.exists()
    else:
        assert victim.read_bytes() == b"precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", NAME]
    assert not journal.poisoned
    assert journal.exists()


# appending (J3) --------------------------------------------------------------


def test_append_creates_the_journal_private_whatever_the_umask(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(6)
    with umask(0):
        end = journal.append(records[:4], expect_end=0)
        end = journal.append(records[4:], expect_end=end)
    assert mode_of(tmp_path / NAME) == 0o600
    assert (tmp_path / NAME).read_bytes() == lines(records)
    assert end == len(lines(records))
    assert verify((tmp_path / NAME).read_bytes()) == (records, b"")


def test_append_lines_writes_the_encoded_records_as_they_are(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(5)
    end = journal.append_lines([encode(r) for r in records[:2]], expect_end=0)
    end = journal.append_lines([encode(r) for r in records[2:]], expect_end=end)
    assert (tmp_path / NAME).read_bytes() == lines(records)
    assert end == len(lines(records))
    with pytest.raises(ValueError, match="at least one record"):
        journal.append_lines([], expect_end=end)


def test_append_needs_records_and_a_sane_end(journal: JournalFile) -> None:
    with pytest.raises(ValueError, match="at least one record"):
        journal.append([], expect_end=0)
    with pytest.raises(ValueError, match="expect_end must be >= 0"):
        journal.append(build(1), expect_end=-1)


def test_a_missing_journal_is_not_recreated_over_a_verified_end(
    journal: JournalFile, tmp_path: Path
) -> None:
    with raises(f"{NAME} is missing; expected 400 bytes"):
        journal.append(build(1), expect_end=400)
    assert not (tmp_path / NAME).exists()


def test_a_concurrent_external_append_is_detected(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(4)
    end = journal.append(records[:2], expect_end=0)
    # Another process appended record 3 (under the lock, but after our read).
    with (tmp_path / NAME).open("ab") as other:
        other.write(encode(records[2]))
    before = (tmp_path / NAME).read_bytes()
    with raises(f"{NAME} has complete lines after offset {end}"):
        journal.append([records[2]], expect_end=end)
    assert (tmp_path / NAME).read_bytes() == before
    assert not journal.poisoned
    # Re-read, and carry on from the real end.
    tail = journal.last_complete()
    assert tail.last_record == records[2]
    assert tail.torn_length == 0
    journal.append([records[3]], expect_end=tail.complete_end)
    assert verify((tmp_path / NAME).read_bytes()) == (records, b"")


def test_a_shorter_journal_or_an_end_inside_a_line_is_refused(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(3)
    end = journal.append(records[:2], expect_end=0)
    with raises(f"{NAME} is shorter ({end} bytes) than its verified part"):
        journal.append([records[2]], expect_end=end + 1)
    with raises(f"offset {end - 1} is not the end of a line"):
        journal.append([records[2]], expect_end=end - 1)
    assert (tmp_path / NAME).read_bytes() == lines(records[:2])
    assert not journal.poisoned


# torn tails (J5, J6) ---------------------------------------------------------


@pytest.mark.parametrize(
    "torn",
    [b'{"at":"2026', b"\x00" * 3000, b"{" + b"\x00" * 10, b"x"],
)
def test_a_torn_tail_is_copied_aside_exactly_then_truncated(
    journal: JournalFile, tmp_path: Path, torn: bytes
) -> None:
    records = build(5)
    end = journal.append(records[:3], expect_end=0)
    with (tmp_path / NAME).open("ab") as crash:
        crash.write(torn)
    tail = journal.last_complete()
    assert (tail.complete_end, tail.torn_length) == (end, len(torn))
    assert tail.last_record == records[2]
    with umask(0):
        new_end = journal.append(records[3:], expect_end=end)
    copy = tmp_path / journal.torn_copy_name(end)
    assert copy.name == f"{NAME}.torn-{end}"
    assert copy.read_bytes() == torn
    assert mode_of(copy) == 0o600
    assert mode_of(tmp_path / NAME) == 0o600
    data = (tmp_path / NAME).read_bytes()
    assert data == lines(records)
    assert new_end == len(data)
    assert verify(data) == (records, b"")
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME, copy.name]


def test_a_journal_holding_only_a_torn_first_line(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(2)
    (tmp_path / NAME).write_bytes(encode(records[0])[:-1])
    (tmp_path / NAME).chmod(0o600)
    tail = journal.last_complete()
    assert tail == JournalTail(len(encode(records[0])) - 1, 0, None, None)
    journal.append(records, expect_end=0)
    assert (tmp_path / f"{NAME}.torn-0").read_bytes() == encode(records[0])[:-1]
    assert (tmp_path / NAME).read_bytes() == lines(records)


def test_an_earlier_identical_torn_copy_is_kept(
    journal: JournalFile, tmp_path: Path
) -> None:
    """A crash between the copy and the truncation: the retry finds its own copy."""
    records = build(3)
    end = journal.append(records[:2], expect_end=0)
    with (tmp_path / NAME).open("ab") as crash:
        crash.write(b'{"seq')
    copy = tmp_path / f"{NAME}.torn-{end}"
    copy.write_bytes(b'{"seq')
    copy.chmod(0o600)
    journal.append([records[2]], expect_end=end)
    assert copy.read_bytes() == b'{"seq'
    assert (tmp_path / NAME).read_bytes() == lines(records)


def test_a_different_torn_copy_is_never_overwritten(
    journal: JournalFile, tmp_path: Path
) -> None:
    """A second tear at an offset already kept aside goes to the next name (J6)."""
    records = build(3)
    end = journal.append(records[:2], expect_end=0)
    copy = tmp_path / f"{NAME}.torn-{end}"
    copy.write_bytes(b"older evidence")
    copy.chmod(0o600)
    second = tmp_path / f"{NAME}.torn-{end}.2"
    second.write_bytes(b"more evidence")
    second.chmod(0o600)
    with (tmp_path / NAME).open("ab") as crash:
        crash.write(b'{"seq')
    journal.append([records[2]], expect_end=end)
    assert copy.read_bytes() == b"older evidence"
    assert second.read_bytes() == b"more evidence"
    assert (tmp_path / f"{NAME}.torn-{end}.3").read_bytes() == b'{"seq'
    assert (tmp_path / NAME).read_bytes() == lines(records)
    assert not journal.poisoned


@pytest.mark.parametrize("plant", ["symlink", "group-readable"])
def test_a_foreign_file_at_the_torn_copy_name_is_refused(
    journal: JournalFile, tmp_path: Path, plant: str
) -> None:
    records = build(3)
    end = journal.append(records[:2], expect_end=0)
    with (tmp_path / NAME).open("ab") as crash:
        crash.write(b'{"seq')
    copy = tmp_path / f"{NAME}.torn-{end}"
    victim = tmp_path / "victim"
    victim.write_bytes(b'{"seq')
    if plant == "symlink":
        copy.symlink_to(victim)
        message = f"{copy.name} is a symlink"
    else:
        copy.write_bytes(b'{"seq')
        copy.chmod(0o640)
        message = f"{copy.name} is open to group or others"
    with raises(message):
        journal.append([records[2]], expect_end=end)
    assert victim.read_bytes() == b'{"seq'
    assert (tmp_path / NAME).read_bytes() == lines(records[:2]) + b'{"seq'


# poisoning (J4) --------------------------------------------------------------


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_a_write_error_poisons_the_writer_for_good(
    dir_fd: int, tmp_path: Path, failing: str
) -> None:
    fs = faulty()
    journal = JournalFile(fs, dir_fd)
    records = build(4)
    end = journal.append(records[:2], expect_end=0)
    fs.fail(failing)
    with raises("journal writer poisoned: [Errno 5]"):
        journal.append([records[2]], expect_end=end)
    assert journal.poisoned
    fs.clear()
    fs.calls.clear()
    for _ in range(3):
        with raises("journal writer poisoned: [Errno 5]"):
            journal.append([records[2]], expect_end=end)
    with raises("journal writer poisoned"):
        journal.replace_with(records, keep_aside_suffix="x")
    assert fs.calls == []  # refused before touching the file
    # Reading is not writing: the journal can still be inspected.
    assert journal.read_from(0)[:end] == lines(records[:2])


def test_a_truncate_error_poisons_the_writer(dir_fd: int, tmp_path: Path) -> None:
    fs = faulty()
    journal = JournalFile(fs, dir_fd)
    records = build(3)
    end = journal.append(records[:2], expect_end=0)
    with (tmp_path / NAME).open("ab") as crash:
        crash.write(b"{")
    fs.fail("ftruncate")
    with raises("journal writer poisoned"):
        journal.append([records[2]], expect_end=end)
    fs.clear()
    with raises("journal writer poisoned"):
        journal.append([records[2]], expect_end=end)
    assert (tmp_path / NAME).read_bytes() == lines(records[:2]) + b"{"


def test_a_directory_fsync_error_on_creation_poisons_the_writer(
    dir_fd: int, tmp_path: Path
) -> None:
    fs = faulty()
    journal = JournalFile(fs, dir_fd)
    fs.fail("fsync")
    with raises("journal writer poisoned"):
        journal.append(build(1), expect_end=0)
    # the directory's, right after the creation
    assert [call.op for call in fs.calls] == ["fsync"]
    assert (tmp_path / NAME).read_bytes() == b""
    fs.clear()
    with raises("journal writer poisoned"):
        journal.append(build(1), expect_end=0)


def test_a_write_error_while_creating_poisons_and_leaves_no_tmp(
    dir_fd: int, tmp_path: Path
) -> None:
    fs = faulty()
    journal = JournalFile(fs, dir_fd)
    fs.fail("write")
    with raises("journal writer poisoned"):
        journal.replace_with(build(2), keep_aside_suffix="damaged")
    assert list(tmp_path.iterdir()) == []


# last_complete ---------------------------------------------------------------


def test_last_complete_reads_only_the_tail_of_a_big_journal(dir_fd: int) -> None:
    records = build(50_000)
    end = JournalFile(OsFileSystem(), dir_fd).append(records, expect_end=0)
    assert end > 10_000_000
    spy = InterceptingFS(record={"read", "pread"})
    tail = JournalFile(spy, dir_fd).last_complete()
    assert tail.last_record == records[-1]
    assert tail.complete_end == tail.size == end
    assert tail.last_offset == end - len(encode(records[-1]))
    bytes_read = sum(len(call.result) for call in spy.calls)
    assert bytes_read <= 2 * TAIL_BLOCK + len(encode(records[-1]))


def test_last_complete_finds_a_line_longer_than_a_block(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(3, tx_size=3 * TAIL_BLOCK)
    end = journal.append(records, expect_end=0)
    with (tmp_path / NAME).open("ab") as crash:
        crash.write(b"\x00" * (2 * TAIL_BLOCK + 5))
    tail = journal.last_complete()
    assert tail.last_record == records[-1]
    assert tail.last_offset == len(lines(records[:2]))
    assert (tail.complete_end, tail.torn_length) == (end, 2 * TAIL_BLOCK + 5)


def test_last_complete_names_the_offset_of_a_damaged_last_line(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(3)
    journal.append(records, expect_end=0)
    data = (tmp_path / NAME).read_bytes()
    start = len(lines(records[:2]))
    year = data.index(b'"at":"2026', start) + 9
    (tmp_path / NAME).write_bytes(data[:year] + b"7" + data[year + 1 :])
    with raises(f"hash mismatch at offset {start}"):
        journal.last_complete()


# repair (J7) -----------------------------------------------------------------


def test_repair_keeps_the_damaged_journal_aside(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(5)
    journal.append(records, expect_end=0)
    damaged = bytearray((tmp_path / NAME).read_bytes())
    damaged[100] ^= 0xFF
    damaged += b"\x00\x00torn"
    (tmp_path / NAME).write_bytes(bytes(damaged))
    with umask(0):
        size = journal.replace_with(records, keep_aside_suffix="damaged-20260101")
    aside = tmp_path / f"{NAME}.damaged-20260101"
    assert aside.read_bytes() == bytes(damaged)
    assert (tmp_path / NAME).read_bytes() == lines(records)
    assert size == len(lines(records))
    assert mode_of(tmp_path / NAME) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME, aside.name]
    assert verify((tmp_path / NAME).read_bytes()) == (records, b"")


def test_repair_never_overwrites_an_earlier_copy(
    journal: JournalFile, tmp_path: Path
) -> None:
    journal.append(build(2), expect_end=0)
    before = (tmp_path / NAME).read_bytes()
    (tmp_path / f"{NAME}.old").write_bytes(b"first repair")
    with raises(f"{NAME}.old already exists"):
        journal.replace_with(build(3), keep_aside_suffix="old")
    assert (tmp_path / f"{NAME}.old").read_bytes() == b"first repair"
    assert (tmp_path / NAME).read_bytes() == before
    assert not journal.poisoned


def test_repair_of_a_missing_journal_just_writes_it(
    journal: JournalFile, tmp_path: Path
) -> None:
    records = build(2)
    assert journal.replace_with(records, keep_aside_suffix="none") == len(
        lines(records)
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]
    assert (tmp_path / NAME).read_bytes() == lines(records)
    assert journal.replace_with([], keep_aside_suffix="emptied") == 0
    assert (tmp_path / NAME).read_bytes() == b""
    assert (tmp_path / f"{NAME}.emptied").read_bytes() == lines(records)


@pytest.mark.parametrize("suffix", ["", ".hidden", "a/b", "a\x00", "x" * 129, "é"])
def test_repair_suffixes_are_plain_names(journal: JournalFile, suffix: str) -> None:
    with pytest.raises(ValueError, match="keep_aside_suffix must be"):
        journal.replace_with(build(1), keep_aside_suffix=suffix)


def test_repair_refuses_a_journal_swapped_under_it(dir_fd: int, tmp_path: Path) -> None:
    JournalFile(OsFileSystem(), dir_fd).append(build(2), expect_end=0)

    def swap(call: Call) -> None:
        """Replace the journal by another file just before it is linked aside."""
        impostor = tmp_path / "impostor"
        impostor.write_bytes(b"impostor\n")
        impostor.rename(tmp_path / NAME)

    fs = InterceptingFS()
    fs.before("link", swap, when=named(NAME))
    journal = JournalFile(fs, dir_fd)
    with raises(f"{NAME} changed while it was being kept aside"):
        journal.replace_with(build(2), keep_aside_suffix="damaged")
    assert (tmp_path / NAME).read_bytes() == b"impostor\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME, f"{NAME}.damaged"]
