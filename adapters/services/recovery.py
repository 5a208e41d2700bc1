"""The artifact recovery pass run when a session is opened (S2.6).

Under the session lock, touching only what no live process holds: every writer
keeps `flock(LOCK_EX)` on its tmp file or open stream, so an entry is handled
only when `flock(LOCK_EX|LOCK_NB)` on it succeeds. The pass

- removes stale `.tmp-*` files of `tool-results/`, and the marker's and the
  journal's stale tmp files in the session directory;
- seals an artifact left `open` by a crash as `partial` over the bytes present;
- records `lost` for an artifact (open, sealed, partial, orphan) whose file is gone.

Entries that are not private regular files of ours are never touched; they are
reported as `refused`. Artifacts a crashed GC apply left quarantined are
resolved from their intents (`gc.resolve_quarantine`): put back, or their
verified deletion recorded.

Artifacts are found in the session view (S8.1), which folds only the events
recorded since it was saved.
"""

from __future__ import annotations

import errno
import fcntl
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spillvault.adapters.services.gc import resolve_quarantine
from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.services.object_gc import recover_objects
from spillvault.adapters.storage.artifact_store import TMP_PREFIX
from spillvault.adapters.storage.content_writer import hash_open_file, summary_for
from spillvault.adapters.storage.eventstore import retrying
from spillvault.adapters.storage.fs import (
    READ_FLAGS,
    check_private,
    is_tmp_for,
    open_private_dir,
)
from spillvault.adapters.storage.layout import MARKER_NAME, TOOL_RESULTS_DIR
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactState
from spillvault.domain.errors import ArtifactAccessError
from spillvault.domain.machines import ARTIFACT_MACHINE
from spillvault.domain.values import artifact_number

if TYPE_CHECKING:
    from spillvault.adapters.storage.eventstore import SessionStore
    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.domain.ports import FileSystem

_STORED = ARTIFACT_MACHINE.tagged("stored")
_READABLE = ARTIFACT_MACHINE.tagged("readable")


@dataclass
class ArtifactRecoveryReport:
    """What one recovery pass did, by filename (never a path, S6.4)."""

    removed_tmp: list[str] = field(default_factory=list)
    live_tmp: list[str] = field(default_factory=list)
    sealed_partial: list[str] = field(default_factory=list)
    live_open: list[str] = field(default_factory=list)
    marked_lost: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    quarantine_resolved: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping of sorted filename lists."""
        return {
            "removed_tmp": sorted(self.removed_tmp),
            "live_tmp": sorted(self.live_tmp),
            "sealed_partial": sorted(self.sealed_partial),
            "live_open": sorted(self.live_open),
            "marked_lost": sorted(self.marked_lost),
            "refused": sorted(self.refused),
            "quarantine_resolved": sorted(self.quarantine_resolved),
        }

    @property
    def changed(self) -> bool:
        """Whether the pass removed or recorded anything."""
        return bool(
            self.removed_tmp
            or self.sealed_partial
            or self.marked_lost
            or self.quarantine_resolved
        )


def recover_artifacts(session: SessionHandles) -> ArtifactRecoveryReport:
    """Run the recovery pass on `session` (see the module docstring)."""
    report = ArtifactRecoveryReport()
    if session.artifacts is not None:
        objects = recover_objects(session)
        report.quarantine_resolved = objects.quarantine_resolved
        report.live_open = objects.live_open
        report.marked_lost = objects.marked_lost
        report.removed_tmp = objects.aborted_uploads  # an upload is its tmp file
        return report
    with session.lock:
        _remove_stale_session_tmps(session, report)
        dir_fd = open_private_dir(
            session.fs,
            TOOL_RESULTS_DIR,
            dir_fd=session.dir_fd,
            what="tool-results directory",
        )
        try:
            _Pass(session, dir_fd, report).run()
        finally:
            session.fs.close(dir_fd)
    return report


def _remove_stale_session_tmps(
    session: SessionHandles, report: ArtifactRecoveryReport
) -> None:
    """Remove tmp files the marker and journal writers left in the session dir.

    Those writers hold the session lock for a tmp file's whole life, and so
    does this pass: any such file found now is a dead writer's.
    """
    fs = session.fs
    removed = False
    for entry in sorted(fs.listdir(session.dir_fd)):
        if not (
            is_tmp_for(entry, MARKER_NAME) or is_tmp_for(entry, RETENTION_JOURNAL_NAME)
        ):
            continue
        if not stat.S_ISREG(fs.lstat(entry, dir_fd=session.dir_fd).st_mode):
            continue  # not a file of ours: left for the operator
        fs.unlink(entry, dir_fd=session.dir_fd)
        report.removed_tmp.append(entry)
        removed = True
    if removed:
        fs.fsync(session.dir_fd)


class _Pass:
    def __init__(
        self, session: SessionHandles, dir_fd: int, report: ArtifactRecoveryReport
    ) -> None:
        self.session = session
        self.fs: FileSystem = session.fs
        self.store: SessionStore = session.store
        self.dir_fd = dir_fd
        self.report = report

    def run(self) -> None:
        removed = False
        for name in sorted(self.fs.listdir(self.dir_fd)):
            if name.startswith(TMP_PREFIX):
                removed = self.remove_stale_tmp(name) or removed
        if removed:
            self.fs.fsync(self.dir_fd)
        self.report.quarantine_resolved = resolve_quarantine(self.session, self.dir_fd)
        records = session_projection(self.session).artifact_records()
        for filename in sorted(records, key=_number):
            state = records[filename].state
            if state is ArtifactState.OPEN:
                self.recover_open(filename)
            elif state in _STORED and self.vanished(filename):
                self.mark_lost(filename)

    # tmp files ----------------------------------------------------------------

    def remove_stale_tmp(self, name: str) -> bool:
        fd = self.open_ours(name)
        if fd is None:
            return False
        try:
            if not self.try_flock(fd):
                self.report.live_tmp.append(name)
                return False
            # Unlink while holding the flock: a writer that created the file and
            # flocks it after us sees its name gone and starts again.
            self.fs.unlink(name, dir_fd=self.dir_fd)
        finally:
            self.fs.close(fd)
        self.report.removed_tmp.append(name)
        return True

    # artifacts ----------------------------------------------------------------

    def recover_open(self, filename: str) -> None:
        try:
            fd = self.open_ours(filename)
        except FileNotFoundError:
            self.mark_lost(filename)
            return
        if fd is None:
            return
        try:
            if not self.try_flock(fd):
                self.report.live_open.append(filename)
                return
            self.seal_partial(filename, fd)
        finally:
            self.fs.close(fd)

    def seal_partial(self, filename: str, fd: int) -> None:
        content, first_line = hash_open_file(self.fs, fd)
        summary = summary_for(content, first_line)

        def attempt() -> bool:
            artifact = self.store.get_artifact(filename)
            if artifact is None or not ARTIFACT_MACHINE.allows(
                artifact.state, "seal_partial"
            ):
                return False  # sealed by its writer meanwhile
            artifact.seal_partial(
                content, summary=summary, sealed_at=self.session.clock.now()
            )
            self.store.save_aggregates(artifact)
            return True

        if retrying(attempt):
            self.report.sealed_partial.append(filename)

    def vanished(self, filename: str) -> bool:
        try:
            self.fs.lstat(filename, dir_fd=self.dir_fd)
        except FileNotFoundError:
            return True
        return False

    def mark_lost(self, filename: str) -> None:
        def attempt() -> bool:
            artifact = self.store.get_artifact(filename)
            # A quarantined file is not in tool-results/: not lost.
            if artifact is None or artifact.state not in _READABLE:
                return False
            if not self.vanished(filename):
                return False  # put back meanwhile (GC restore)
            artifact.mark_lost(detected_at=self.session.clock.now())
            self.store.save_aggregates(artifact)
            return True

        if retrying(attempt):
            self.report.marked_lost.append(filename)

    # helpers ------------------------------------------------------------------

    def open_ours(self, name: str) -> int | None:
        """Open per A4; None (reported refused) unless a private regular file."""
        try:
            fd = self.fs.open(name, READ_FLAGS, dir_fd=self.dir_fd)
        except FileNotFoundError:
            if name.startswith(TMP_PREFIX):
                return None  # its writer finished meanwhile
            raise
        except OSError as error:
            if error.errno in {errno.ELOOP, errno.EACCES, errno.EPERM}:
                self.report.refused.append(name)
                return None
            raise
        try:
            check_private(self.fs, fd, name, directory=False)
        except ArtifactAccessError:
            self.fs.close(fd)
            self.report.refused.append(name)
            return None
        except BaseException:
            self.fs.close(fd)
            raise
        return fd

    def try_flock(self, fd: int) -> bool:
        try:
            self.fs.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def artifact_filenames(session: SessionHandles) -> list[str]:
    """Return every artifact with a creation event, from the session view (S8.1)."""
    return session_projection(session).artifact_filenames()


def _number(filename: str) -> int:
    return artifact_number(filename) or 0


__all__ = ["ArtifactRecoveryReport", "artifact_filenames", "recover_artifacts"]
