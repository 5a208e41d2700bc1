"""The tests' intercepting seam (support.intercept) does what its hooks say."""

from __future__ import annotations

import errno
import os
import pickle
import threading
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.storage.fs import OS_FILESYSTEM, write_all

from support.intercept import OPERATIONS, Call, Gate, InterceptingFS, named
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from spillvault.domain.ports import FileSystem

FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    yield fd
    os.close(fd)


def create(fs: FileSystem, name: str, dir_fd: int, data: bytes = b"") -> None:
    fd = fs.open(name, FLAGS, 0o600, dir_fd=dir_fd)
    try:
        write_all(fs, fd, data)
    finally:
        fs.close(fd)


def test_the_operations_are_the_ports() -> None:
    assert OPERATIONS == (
        "open", "close", "read", "pread", "write", "fsync", "ftruncate", "fstat",
        "fchmod", "lstat", "mkdir", "link", "rename", "unlink", "rmdir",
        "listdir", "flock",
    )  # fmt: skip
    assert set(InterceptingFS.__annotations__) == set(OPERATIONS)


def test_an_unhooked_operation_is_the_inner_seams_own_function() -> None:
    fs = InterceptingFS()
    for op in OPERATIONS:
        assert getattr(fs, op) is getattr(OS_FILESYSTEM, op), op
    hook = fs.before("open", print)
    assert fs.open is not os.open
    assert fs.close is os.close
    hook.remove()
    assert fs.open is os.open


def test_a_call_names_its_arguments_as_the_port_does() -> None:
    call = Call("open", ("f", FLAGS), {"dir_fd": 3})
    assert (call["path"], call["flags"], call["mode"], call["dir_fd"]) == (
        "f",
        FLAGS,
        0o777,
        3,
    )
    assert call.name == "f"
    assert Call("rename", ("a", "b"), {}).name == "a"
    assert Call("fsync", (4,), {}).name is None
    with pytest.raises(KeyError, match="fsync has no argument 'path'"):
        Call("fsync", (4,), {})["path"]


def test_unknown_operations_and_counts_are_refused() -> None:
    fs = InterceptingFS()
    with pytest.raises(ValueError, match=r"\['opne'\]"):
        fs.fail("opne")
    with pytest.raises(ValueError, match="count from 1"):
        fs.fail("open", nth=0)
    with pytest.raises(ValueError, match="count from 1"):
        fs.fail("open", times=0)


def test_fail_acts_on_the_nth_matching_call_for_times_calls(
    tmp_path: Path, dir_fd: int
) -> None:
    fs = InterceptingFS()
    hook = fs.fail("open", errno.ENOSPC, when=named("b", "c", "d"), nth=2, times=1)
    create(fs, "a", dir_fd)  # not matched
    create(fs, "b", dir_fd)  # matched, let through
    with pytest.raises(OSError, match="No space left") as raised:
        create(fs, "c", dir_fd)
    assert raised.value.errno == errno.ENOSPC
    create(fs, "d", dir_fd)  # acted on once: through again
    assert (hook.hits, hook.fired) == (3, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "d"]


def test_fail_takes_a_message(dir_fd: int) -> None:
    fs = InterceptingFS()
    fs.fail("open", message="injected")
    with pytest.raises(OSError, match="injected") as raised:
        create(fs, "a", dir_fd)
    assert raised.value.errno == errno.EIO


def test_before_after_and_around_nest_in_registration_order(dir_fd: int) -> None:
    fs = InterceptingFS()
    seen: list[str] = []
    fs.before("write", lambda call: seen.append(f"before {call['data']!r}"))

    def shorten(call: Call, proceed: Callable[..., int]) -> int:
        seen.append("around")
        return proceed(call["fd"], call["data"][:2])

    fs.around("write", shorten)
    fs.after("write", lambda call, result: seen.append(f"after {result}"))
    create(fs, "a", dir_fd, b"abcde")
    assert seen == [
        "before b'abcde'",
        "around",
        "after 2",  # the inner layers see the shortened call
        "before b'cde'",
        "around",
        "after 2",
        "before b'e'",
        "around",
        "after 1",
    ]


def test_an_around_hook_may_replace_the_result(dir_fd: int) -> None:
    fs = InterceptingFS()
    create(fs, "a", dir_fd, b"abcdef")
    fs.around("pread", lambda call, proceed: proceed()[:1])
    fd = fs.open("a", os.O_RDONLY, dir_fd=dir_fd)
    try:
        assert fs.pread(fd, 6, 0) == b"a"
    finally:
        fs.close(fd)


def test_after_does_not_run_when_the_operation_raised(dir_fd: int) -> None:
    fs = InterceptingFS()
    after = fs.after("open", lambda call, result: None)
    fs.fail("open")  # inner to `after`
    with pytest.raises(OSError, match="Input/output error"):
        create(fs, "a", dir_fd)
    assert (after.hits, after.fired) == (1, 1)  # reached, acted on, not called


def test_recording_keeps_calls_and_results(dir_fd: int) -> None:
    fs = InterceptingFS(record={"open", "write", "pread"})
    create(fs, "a", dir_fd, b"data")
    fd = fs.open("a", os.O_RDONLY, dir_fd=dir_fd)
    assert fs.pread(fd, 10, 1) == b"ata"
    fs.close(fd)
    assert [call.op for call in fs.calls] == ["open", "write", "open", "pread"]
    assert fs.names("open") == ["a", "a"]
    (pread,) = fs.calls_to("pread")
    assert (pread["offset"], pread.result) == (1, b"ata")
    assert fs.close is os.close  # not recorded, not hooked


def test_a_failing_call_is_recorded_without_a_result(dir_fd: int) -> None:
    fs = InterceptingFS(record=True)
    fs.fail("fsync")
    fd = fs.open("a", FLAGS, 0o600, dir_fd=dir_fd)
    with pytest.raises(OSError, match="Input/output error"):
        fs.fsync(fd)
    fs.close(fd)
    assert [(c.op, c.result) for c in fs.calls] == [
        ("open", fd),
        ("fsync", None),
        ("close", None),
    ]


def test_a_hook_removes_itself_and_with_unhooks(dir_fd: int) -> None:
    fs = InterceptingFS()
    seen: list[Any] = []

    def once(call: Call) -> None:
        seen.append(call.name)
        hook.remove()
        hook.remove()  # harmless

    hook = fs.before("open", once)
    create(fs, "a", dir_fd)
    create(fs, "b", dir_fd)
    assert seen == ["a"]
    with (
        fs.fail("open") as failing,
        pytest.raises(OSError, match="Input/output error"),
    ):
        create(fs, "c", dir_fd)
    create(fs, "c", dir_fd)
    assert failing.fired == 1
    fs.fail(OPERATIONS)
    fs.clear()
    assert all(getattr(fs, op) is getattr(OS_FILESYSTEM, op) for op in OPERATIONS)


def test_a_gate_holds_the_call_until_released(dir_fd: int) -> None:
    fs = InterceptingFS()
    gate = Gate()
    fs.before("open", gate, when=named("held"))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (create(fs, "held", dir_fd), done.set()))
    worker.start()
    assert gate.reached.wait(HANG_GUARD_SECONDS)
    assert not done.is_set()  # reached, not passed: released only below
    gate.release()
    worker.join(HANG_GUARD_SECONDS)
    assert done.is_set()


def test_a_gate_never_released_fails_the_call(dir_fd: int) -> None:
    fs = InterceptingFS()
    fs.before("open", Gate(timeout=0.01))
    with pytest.raises(TimeoutError, match="never released the gate held at open"):
        create(fs, "a", dir_fd)


def refuse_links(call: Call) -> None:
    raise OSError(errno.EPERM, f"no link to {call['dst']}")


def test_it_pickles_with_its_hooks_and_recorded_calls(
    tmp_path: Path, dir_fd: int
) -> None:
    fs = InterceptingFS(record={"open"})
    fs.fail("open", errno.ENOSPC, when=named("full"), times=1)
    fs.before("link", refuse_links)
    create(fs, "a", dir_fd)
    copy = pickle.loads(pickle.dumps(fs))  # noqa: S301 - our own bytes
    assert copy.names("open") == ["a"]
    assert copy.close is os.close
    with pytest.raises(OSError, match="No space left"):
        create(copy, "full", dir_fd)
    create(copy, "full", dir_fd)
    with pytest.raises(OSError, match="no link to b"):
        copy.link("a", "b", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    assert not (tmp_path / "b").exists()
    (hook, _) = copy._hooks
    assert hook.fs is copy
    assert fs.names("open") == ["a"]  # the original is untouched
