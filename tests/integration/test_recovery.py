"""The artifact recovery pass on opening a session (S2.6)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.services.recovery import (
    ArtifactRecoveryReport,
    artifact_filenames,
    recover_artifacts,
)
from spillvault.adapters.session import Session, open_session
from spillvault.adapters.storage.artifact_store import TMP_PREFIX, LocalArtifactStore
from spillvault.adapters.storage.layout import MARKER_NAME
from spillvault.domain.constants import CHUNK_SIZE, RETENTION_JOURNAL_NAME
from spillvault.testing.artifact_stores import expected_content

from support.fakes import FakeClock
from support.intercept import InterceptingFS, named
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.session import Session

    from support.intercept import Call

MiB = CHUNK_SIZE
EMPTY = {
    "removed_tmp": [],
    "live_tmp": [],
    "sealed_partial": [],
    "live_open": [],
    "marked_lost": [],
    "refused": [],
    "quarantine_resolved": [],
}


expected = expected_content


def report_of(session: Session) -> dict[str, list[str]]:
    return recover_artifacts(session).to_dict()


def opened_report(session: Session) -> dict[str, list[str]]:
    """What the recovery pass that `open_session` runs found (S2.6)."""
    assert session.recovery is not None
    return session.recovery.to_dict()


def results(session_dir: Path) -> list[str]:
    return sorted(os.listdir(session_dir / "tool-results"))


def make_file(path: Path, data: bytes = b"stale") -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data)
    os.close(fd)


def crash(stream: Any) -> None:
    """Drop a stream's fd (and flock) without sealing, as a dead process would."""
    os.close(stream._fd)
    stream._fd = None


@pytest.fixture
def session(session_dir: Path) -> Iterator[Session]:
    with open_session(session_dir, event_store="memory", clock=FakeClock()) as opened:
        yield opened


@pytest.fixture
def store(session: Session) -> Iterator[LocalArtifactStore]:
    with LocalArtifactStore(session) as opened:
        yield opened


# in-process ------------------------------------------------------------------


def test_a_clean_session_needs_nothing(
    store: LocalArtifactStore, session: Session
) -> None:
    store.store([b"a"], source_tool="t")
    with store.open_stream("t") as stream:
        stream.write(b"b")
    assert report_of(session) == EMPTY


def test_stale_tmp_files_are_removed_and_others_refused(
    session: Session, session_dir: Path, tmp_path: Path
) -> None:
    tool_results = session_dir / "tool-results"
    make_file(tool_results / ".tmp-dead1")
    make_file(tool_results / ".tmp-dead2", b"")
    (tool_results / ".tmp-dir").mkdir(mode=0o700)
    victim = tmp_path / "victim"
    make_file(victim, b"keep me")
    (tool_results / ".tmp-link").symlink_to(victim)
    os.mkfifo(tool_results / ".tmp-fifo", 0o600)
    make_file(tool_results / ".tmp-loose")
    (tool_results / ".tmp-loose").chmod(0o644)
    report = report_of(session)
    assert report["removed_tmp"] == [".tmp-dead1", ".tmp-dead2"]
    assert report["refused"] == [".tmp-dir", ".tmp-fifo", ".tmp-link", ".tmp-loose"]
    assert results(session_dir) == [".tmp-dir", ".tmp-fifo", ".tmp-link", ".tmp-loose"]
    assert victim.read_bytes() == b"keep me"


def test_a_live_writers_tmp_and_stream_are_skipped(
    store: LocalArtifactStore, session: Session, session_dir: Path
) -> None:
    seen: list[dict[str, list[str]]] = []

    class RecoverMidway:
        def feed(self, chunk: bytes, newlines: int | None = None) -> None:
            if not seen:
                seen.append(report_of(session))

    with store.open_stream("t") as stream:
        stream.write(b"running\n")
        store.store([b"a", b"b"], source_tool="t", key_line_scanner=RecoverMidway())
    [midway] = seen
    assert len(midway["live_tmp"]) == 1
    assert midway["live_tmp"][0].startswith(".tmp-")
    assert midway["live_open"] == [stream.filename]
    assert midway["removed_tmp"] == midway["sealed_partial"] == []
    assert stream.artifact.state == "sealed"
    assert results(session_dir) == ["tool_result_001.txt", "tool_result_002.txt"]


def test_an_abandoned_open_artifact_is_sealed_partial_over_its_bytes(
    store: LocalArtifactStore, session: Session, session_dir: Path
) -> None:
    stream = store.open_stream("bash", tool_use_id="tu-1")
    data = b"progress 1\n" + b"\xff" * (MiB + 3) + b"\nprogress 2"
    stream.write(data)
    crash(stream)
    report = report_of(session)
    assert report["sealed_partial"] == [stream.filename]
    artifact = session.store.get_artifact(stream.filename)
    assert artifact is not None
    assert artifact.state == "partial"
    assert artifact.content == expected(data)
    assert artifact.summary.startswith("progress 1 (3 lines")
    assert artifact.tool_use_id == "tu-1"
    assert (session_dir / "tool-results" / stream.filename).read_bytes() == data
    assert report_of(session) == EMPTY  # idempotent


def test_vanished_files_are_marked_lost(
    store: LocalArtifactStore, session: Session, session_dir: Path
) -> None:
    sealed = store.store([b"sealed"], source_tool="t").filename
    kept = store.store([b"kept"], source_tool="t").filename
    partial = store.open_stream("t")
    partial.write(b"p")
    partial.fail()
    open_one = store.open_stream("t")
    crash(open_one)
    for name in (sealed, partial.filename, open_one.filename):
        (session_dir / "tool-results" / name).unlink()
    report = report_of(session)
    assert report["marked_lost"] == sorted(
        [sealed, partial.filename, open_one.filename]
    )
    for name in (sealed, partial.filename, open_one.filename):
        artifact = session.store.get_artifact(name)
        assert artifact is not None
        assert artifact.state == "lost", name
    kept_artifact = session.store.get_artifact(kept)
    assert kept_artifact is not None
    assert kept_artifact.state == "sealed"
    assert report_of(session) == EMPTY


def test_a_quarantine_intent_is_resolved_from_where_the_file_is(
    store: LocalArtifactStore, session: Session, session_dir: Path
) -> None:
    gone, back = (store.store([b"q"], source_tool="t").filename for _ in range(2))
    for name in (gone, back):
        artifact = session.store.get_artifact(name)
        assert artifact is not None
        artifact.quarantine(f"intent-{name}", quarantined_at=session.clock.now())
        session.store.save_aggregates(artifact)
    # `gone`: unlinked after its checks, then the crash; `back`: never moved
    (session_dir / "tool-results" / gone).unlink()
    assert report_of(session) == {**EMPTY, "quarantine_resolved": sorted([gone, back])}
    states = {n: session.store.get_artifact(n).state for n in (gone, back)}  # type: ignore[union-attr]
    assert states == {gone: "deleted", back: "sealed"}


def test_a_symlink_at_an_open_artifacts_name_is_refused(
    store: LocalArtifactStore, session: Session, session_dir: Path, tmp_path: Path
) -> None:
    stream = store.open_stream("t")
    crash(stream)
    path = session_dir / "tool-results" / stream.filename
    path.unlink()
    victim = tmp_path / "victim"
    make_file(victim, b"outside")
    path.symlink_to(victim)
    report = report_of(session)
    assert report["refused"] == [stream.filename]
    assert report["sealed_partial"] == report["marked_lost"] == []
    assert victim.read_bytes() == b"outside"


def test_the_report_is_json_ready_and_path_free(
    store: LocalArtifactStore, session: Session, session_dir: Path
) -> None:
    make_file(session_dir / "tool-results" / ".tmp-x")
    stream = store.open_stream("t")
    crash(stream)
    report = recover_artifacts(session)
    assert isinstance(report, ArtifactRecoveryReport)
    assert report.changed
    data = report.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == set(EMPTY)
    names = [name for values in data.values() for name in values]
    assert names == [".tmp-x", stream.filename]
    assert not any("/" in name for name in names)


def test_recovery_runs_under_the_session_lock(
    session: Session, monkeypatch: Any
) -> None:
    held: list[bool] = []
    real = session.fs.listdir

    def listdir(fd: int) -> list[str]:
        held.append(session.lock.held)
        return real(fd)

    monkeypatch.setattr(session.fs, "listdir", listdir)
    recover_artifacts(session)
    assert held == [True, True, True]  # session dir, tool-results, .quarantine


def test_artifacts_are_found_from_their_creation_events(
    store: LocalArtifactStore, session: Session
) -> None:
    names = {store.store([b"a"], source_tool="t").filename for _ in range(3)}
    with store.open_stream("t") as stream:
        stream.write(b"x")
    names.add(stream.filename)
    assert sorted(artifact_filenames(session)) == sorted(names)


# other processes -------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, time
    from spillvault.adapters.session import open_session
    from spillvault.adapters.storage.artifact_store import LocalArtifactStore

    mode, path = sys.argv[1], sys.argv[2]
    session = open_session(path)
    store = LocalArtifactStore(session)

    def ready(name):
        sys.stdout.write(name + "\\n")
        sys.stdout.flush()

    def slow():
        yield b"first line\\n" + b"x" * 65536
        ready("tmp")
        for n in range(100000):  # a big output, produced slowly
            time.sleep(0.01)
            yield b"%d\\n" % n + b"y" * 65536

    def held():
        yield b"held\\n"
        ready("tmp")
        sys.stdin.read()  # until the parent closes our stdin

    if mode == "store":
        store.store(slow(), source_tool="bash")
    elif mode == "stream":
        stream = store.open_stream("bash")
        stream.write(b"first line\\n" + b"x" * 65536)
        ready(stream.filename)
        for n in range(100000):
            time.sleep(0.01)
            stream.write(b"%d\\n" % n + b"y" * 65536)
    elif mode == "hold":
        stream = store.open_stream("bash")
        stream.write(b"live stream\\n")
        store.store(held(), source_tool="bash")
        stream.close()
    ready("done")
    """
)


def start_child(mode: str, session_dir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(session_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_line(child: subprocess.Popen[bytes], timeout: float = 30) -> str:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    if not ready:
        child.kill()
        pytest.fail("child did not report in time")
    line = child.stdout.readline().decode().strip()
    if not line:
        child.wait()
        assert child.stderr is not None
        pytest.fail(f"child died: {child.stderr.read().decode()}")
    return line


def kill(child: subprocess.Popen[bytes]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(HANG_GUARD_SECONDS)
    assert child.returncode == -signal.SIGKILL


def test_a_store_killed_midway_leaves_a_tmp_that_recovery_removes(
    session_dir: Path,
) -> None:
    child = start_child("store", session_dir)
    try:
        assert wait_line(child) == "tmp"
    finally:
        kill(child)
    [tmp] = results(session_dir)
    assert tmp.startswith(".tmp-")
    assert (session_dir / "tool-results" / tmp).stat().st_size > 65536
    with open_session(session_dir) as session:
        report = opened_report(session)
        assert report == {**EMPTY, "removed_tmp": [tmp]}
        assert results(session_dir) == []
        assert artifact_filenames(session) == []


def test_a_stream_killed_midway_is_sealed_partial_by_the_next_open(
    session_dir: Path,
) -> None:
    child = start_child("stream", session_dir)
    try:
        name = wait_line(child)
        deadline = time.monotonic() + HANG_GUARD_SECONDS
        while (session_dir / "tool-results" / name).stat().st_size < 3 * 65536:
            assert time.monotonic() < deadline, "child stopped writing"
            time.sleep(0.01)
    finally:
        kill(child)
    data = (session_dir / "tool-results" / name).read_bytes()
    with open_session(session_dir) as session:
        report = opened_report(session)
        assert report == {**EMPTY, "sealed_partial": [name]}
        artifact = session.store.get_artifact(name)
        assert artifact is not None
        assert artifact.state == "partial"
        assert artifact.content == expected(data)
        assert artifact.summary.startswith("first line (")


def test_a_live_writer_in_another_process_is_not_touched(session_dir: Path) -> None:
    child = start_child("hold", session_dir)
    try:
        assert wait_line(child) == "tmp"
        [tmp, stream_name] = results(session_dir)
        assert tmp.startswith(".tmp-")
        with open_session(session_dir) as session:
            report = opened_report(session)
            assert report == {**EMPTY, "live_tmp": [tmp], "live_open": [stream_name]}
            assert results(session_dir) == [tmp, stream_name]
            artifact = session.store.get_artifact(stream_name)
            assert artifact is not None
            assert artifact.state == "open"
        assert child.stdin is not None
        child.stdin.close()  # let the writer finish
        assert wait_line(child) == "done"
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            kill(child)
    assert results(session_dir) == [stream_name, "tool_result_002.txt"]
    with open_session(session_dir) as session:
        assert opened_report(session) == EMPTY
        stream_artifact = session.store.get_artifact(stream_name)
        stored = session.store.get_artifact("tool_result_002.txt")
        assert stream_artifact is not None
        assert stored is not None
        assert stream_artifact.state == stored.state == "sealed"
        assert stored.content == expected(b"held\n")


def test_opening_a_session_runs_the_recovery_pass(session_dir: Path) -> None:
    open_session(session_dir).close()
    stale = session_dir / "tool-results" / ".tmp-0123456789abcdef"
    stale.write_bytes(b"left by a crash")
    stale.chmod(0o600)
    with open_session(session_dir) as session:
        assert opened_report(session)["removed_tmp"] == [stale.name]
    assert not stale.exists()


def test_inspection_can_open_without_the_recovery_pass(session_dir: Path) -> None:
    open_session(session_dir).close()
    stale = session_dir / "tool-results" / ".tmp-0123456789abcdef"
    stale.write_bytes(b"left by a crash")
    stale.chmod(0o600)
    with open_session(session_dir, recover=False) as session:
        assert session.recovery is None
    assert stale.exists()


# ------------------------------------ under injected faults and races (S2.6)


def state_of(session: Session, name: str) -> str | None:
    artifact = session.store.get_artifact(name)
    return None if artifact is None else artifact.state


def abandoned(store: LocalArtifactStore, data: bytes) -> str:
    """An artifact left open by a dead writer: its fd (and flock) dropped."""
    stream = store.open_stream("t")
    stream.write(data)
    os.close(stream._fd)
    stream._fd = None
    return stream.filename


def fds_on(path: Path) -> list[int]:
    """This process's descriptors open on `path`."""
    found = []
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(f"/proc/self/fd/{entry}") == str(path):
                found.append(int(entry))
    return found


def private_file(path: Path, data: bytes = b"stale") -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data)
    os.close(fd)
    return path


class TestUnderInjectedFaults:
    """The pass on a real session through an `InterceptingFS`, hooked per test.

    The hook plays another process (or a failing disk) at one exact moment.
    """

    @pytest.fixture
    def fs(self) -> InterceptingFS:
        return InterceptingFS()

    @pytest.fixture
    def session(self, session_dir: Path, fs: InterceptingFS) -> Iterator[Session]:
        with open_session(
            session_dir, fs=fs, event_store="memory", clock=FakeClock()
        ) as s:
            yield s

    @pytest.fixture
    def store(self, session: Session) -> Iterator[LocalArtifactStore]:
        with LocalArtifactStore(session) as opened:
            yield opened

    @pytest.mark.parametrize("owner", [MARKER_NAME, RETENTION_JOURNAL_NAME])
    def test_a_directory_named_like_a_writer_tmp_file_is_left_alone(
        self, session_dir: Path, owner: str
    ) -> None:
        with open_session(session_dir):
            pass
        odd = session_dir / f".{owner}.tmp-0123456789abcdef"
        odd.mkdir(mode=0o700)
        (odd / "inside").write_bytes(b"the operator's\n")
        stale = private_file(session_dir / f".{owner}.tmp-fedcba9876543210")
        with open_session(session_dir) as session:
            assert session.recovery is not None
            assert session.recovery.removed_tmp == [stale.name]
        assert not stale.exists()
        assert (odd / "inside").read_bytes() == b"the operator's\n"

    def test_a_tmp_file_gone_before_the_pass_opens_it_is_skipped(
        self, session: Session, session_dir: Path, fs: InterceptingFS
    ) -> None:
        tmp = private_file(session_dir / "tool-results" / f"{TMP_PREFIX}finished")

        def vanish(call: Call) -> None:
            tmp.unlink()  # its writer renamed it into place meanwhile

        with fs.before("open", vanish, when=named(tmp.name)):
            report = recover_artifacts(session)
        assert report.removed_tmp == report.live_tmp == report.refused == []
        assert not report.changed

    @pytest.mark.parametrize("op", ["open", "fstat"])
    def test_an_io_error_opening_an_entry_stops_the_pass(
        self, session: Session, session_dir: Path, fs: InterceptingFS, op: str
    ) -> None:
        tmp = private_file(session_dir / "tool-results" / f"{TMP_PREFIX}stale")
        opened = fs.watch("open", when=named(tmp.name))  # from its open on, `op` fails
        with (
            opened,
            fs.fail(op, errno.EIO, when=lambda call: opened.hits > 0),
            pytest.raises(OSError, match="Input/output error"),
        ):
            recover_artifacts(session)
        assert fds_on(tmp) == []  # closed on the way out
        assert tmp.exists()  # not removed on an error
        assert recover_artifacts(session).removed_tmp == [tmp.name]  # the next pass

    def test_an_open_artifact_settled_while_hashed_is_not_sealed_again(
        self, session: Session, store: LocalArtifactStore, fs: InterceptingFS
    ) -> None:
        name = abandoned(store, b"half of it\n" * 10)

        def settle(call: Call) -> None:
            # Another process records the artifact's fate meanwhile.
            artifact = session.store.get_artifact(name)
            assert artifact is not None
            artifact.mark_lost(detected_at=session.clock.now())
            session.store.save_aggregates(artifact)

        with fs.before({"read", "pread"}, settle, times=1) as hook:
            report = recover_artifacts(session)
        assert hook.fired == 1  # the hook ran
        assert report.sealed_partial == []
        assert state_of(session, name) == "lost"

    def test_a_vanished_artifact_put_back_before_it_is_recorded_is_not_lost(
        self,
        session: Session,
        store: LocalArtifactStore,
        session_dir: Path,
        fs: InterceptingFS,
    ) -> None:
        name = store.store([b"sealed bytes\n"], source_tool="t").filename
        path = session_dir / "tool-results" / name
        aside = session_dir / "aside"
        path.rename(aside)

        def put_back(call: Call) -> None:
            aside.rename(path)

        # seen gone; back before the loss is recorded
        with fs.before("lstat", put_back, when=named(name), nth=2, times=1) as lstats:
            report = recover_artifacts(session)
        assert lstats.hits == 2
        assert report.marked_lost == []
        assert state_of(session, name) == "sealed"
        assert path.read_bytes() == b"sealed bytes\n"

    def test_a_vanished_artifact_deleted_meanwhile_is_not_marked_lost(
        self,
        session: Session,
        store: LocalArtifactStore,
        session_dir: Path,
        fs: InterceptingFS,
    ) -> None:
        name = store.store([b"sealed bytes\n"], source_tool="t").filename
        (session_dir / "tool-results" / name).unlink()

        def delete(call: Call) -> None:
            # A collector in another process records its deletion meanwhile.
            artifact = session.store.get_artifact(name)
            assert artifact is not None
            artifact.quarantine("intent", quarantined_at=session.clock.now())
            artifact.delete(deleted_at=session.clock.now())
            session.store.save_aggregates(artifact)

        with fs.before("lstat", delete, when=named(name), times=1) as hook:
            report = recover_artifacts(session)
        assert hook.fired == 1
        assert report.marked_lost == []
        assert state_of(session, name) == "deleted"
