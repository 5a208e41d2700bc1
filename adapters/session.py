"""`open_session`: the one composition root, and session creation and opening (S4.4).

Creation, under the session lock: directories, `.lock`, the store with its
identity event, and `session.json` (the marker) last. Opening demands that
marker and store agree; anything else that may hide evidence is refused with
`ArtifactLeaseJournalError`, and a store is never re-created silently.

Only mode "create" (the library's default, and `spillvault run`) makes a
session. Modes "open" and "read" demand a valid marker first and, without
one, raise `ArtifactSessionNotFoundError` having created nothing: no
directory, no `.lock`. Mode "read" is a view that writes nothing at all (no
lock file, no recovery pass, the store opened read-only), so a backup or a
read-only mount stays readable; its writes raise `ArtifactSessionReadOnlyError`.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import socket
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args
from uuid import UUID, uuid5

from spillvault.adapters.harness import model_tools
from spillvault.adapters.services.externalizer import SessionExternalizer
from spillvault.adapters.services.read_only import RefusingWrites
from spillvault.adapters.services.recovery import recover_artifacts
from spillvault.adapters.services.retention_journal import SessionRetentionJournal
from spillvault.adapters.storage.advisory_lock import advisory_lock_for
from spillvault.adapters.storage.artifact_store import LocalArtifactStore
from spillvault.adapters.storage.clock import SYSTEM_CLOCK
from spillvault.adapters.storage.fs import (
    DIR_FLAGS,
    OS_FILESYSTEM,
    check_private,
    exists,
    open_private_dir,
    read_private_file,
    write_new_file,
)
from spillvault.adapters.storage.handles import SessionHandles
from spillvault.adapters.storage.hyperscan_cache import install as install_cache
from spillvault.adapters.storage.journal_table import JournalTable
from spillvault.adapters.storage.layout import (
    MARKER_NAME,
    QUARANTINE_DIR,
    TOOL_RESULTS_DIR,
)
from spillvault.adapters.storage.memory_store import MemoryBackend
from spillvault.adapters.storage.object_store import ObjectArtifactStore
from spillvault.adapters.storage.postgres_store import (
    DSN_SCHEMES,
    PostgresBackend,
    schema_for,
)
from spillvault.adapters.storage.s3_client import (
    ARTIFACTS_ENV,
    EVENT_STORE_ENV,
    ObjectLocation,
    s3_client,
)
from spillvault.adapters.storage.session_lock import (
    LOCK_NAME,
    SessionLock,
    session_lock_for,
)
from spillvault.adapters.storage.sqlite_store import SQLiteBackend
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactLeaseJournalError,
    ArtifactSessionNotFoundError,
    ArtifactSessionReadOnlyError,
    ObjectStoreConfigError,
)
from spillvault.domain.handles import MAX_HANDLE_LENGTH, MAX_SESSION_ID_LENGTH
from spillvault.domain.safeguards import Safeguards
from spillvault.domain.store_identity import STORE_LAYOUT_VERSION, StoreIdentity
from spillvault.domain.timestamps import format_timestamp
from spillvault.domain.values import check_session_id

if TYPE_CHECKING:
    from collections.abc import Mapping

    from spillvault.adapters.harness.model_tools import Format
    from spillvault.adapters.services.recovery import ArtifactRecoveryReport
    from spillvault.adapters.storage.eventstore import EventStoreBackend, SessionStore
    from spillvault.domain.policy import SpillPolicy
    from spillvault.domain.ports import ArtifactStore, Clock, FileSystem

logger = logging.getLogger(__name__)

MARKER_FORMAT = "spillvault-session"
MARKER_LIMIT = 4096
_STORE_IDS = UUID("c2a5e0d4-6f1b-4b7e-9a3c-58d1e6f0b2a7")
_VAULT_STORE_IDS = UUID("5d0c1a9e-2b47-4f38-8e61-b3c7d2a4f915")
SessionMode = Literal["create", "open", "read"]
"""create: create or open; open: an existing session; read: a read-only view."""
_READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES})

# Compiled key-line and secret databases outlive the process (a hook runs one
# process per command); the composition root says where they are kept.
install_cache()


@dataclass
class Session(SessionHandles):
    """An open session: its handles, and the services built on them."""

    recovery: ArtifactRecoveryReport | None = field(default=None, init=False)
    _externalizer: ToolResultExternalizer | None = field(
        default=None, init=False, repr=False
    )
    _journal: ArtifactRetentionJournal | None = field(
        default=None, init=False, repr=False
    )

    @property
    def externalizer(self) -> ToolResultExternalizer:
        """Return the session's spill gate and page-fault reader (S1, S3)."""
        if self._externalizer is None:
            self._externalizer = ToolResultExternalizer(
                self.path, policy=self.policy, session=self
            )
        return self._externalizer

    @property
    def journal(self) -> ArtifactRetentionJournal:
        """Return the session's retention leases and journal (S4, S5)."""
        if self._journal is None:
            if self.read_only:
                self._journal = ReadOnlyRetentionJournal(self.path, session=self)
            else:
                self._journal = ArtifactRetentionJournal(self.path, session=self)
        return self._journal

    def _close_resources(self) -> None:
        if self._externalizer is not None:
            self._externalizer.store.close()
        super()._close_resources()


class ToolResultExternalizer(SessionExternalizer):
    """The seed's spill gate, opened on a session directory (or an open session)."""

    session: Session

    def __init__(
        self,
        session_dir: str | os.PathLike[str],
        *,
        policy: SpillPolicy | None = None,
        event_store: str | None = None,
        session: Session | None = None,
    ) -> None:
        opened = session or open_session(
            session_dir, policy=policy, event_store=event_store
        )
        store = None
        try:
            store = artifact_store_for(opened)
            super().__init__(opened, store, policy=policy, owns_session=session is None)
        except BaseException:
            if store is not None:
                store.close()
            if session is None:
                opened.close()
            raise

    @property
    def tool_results_dir(self) -> Path:
        """Return the directory holding this session's artifacts."""
        return Path(self.session.path, TOOL_RESULTS_DIR)

    def tool_definitions(self, format: Format) -> list[dict[str, Any]]:  # noqa: A002
        """Return the read/grep tools for a model, in "anthropic" or "openai" form."""
        return model_tools.tool_definitions(format)

    def handle_tool_call(self, name: str, arguments: Mapping[str, Any] | str) -> str:
        """Run a read/grep tool call; errors come back as text the model can act on."""
        return model_tools.handle_tool_call(self, name, arguments)


class ArtifactRetentionJournal(SessionRetentionJournal):
    """The seed's retention journal, opened on a session directory (or session)."""

    session: Session

    def __init__(
        self,
        session_dir: str | os.PathLike[str],
        *,
        event_store: str | None = None,
        session: Session | None = None,
    ) -> None:
        opened = session or open_session(session_dir, event_store=event_store)
        super().__init__(
            opened,
            open_artifacts=partial(artifact_store_for, opened),
            owns_session=session is None,
        )


class ReadOnlyRetentionJournal(RefusingWrites, ArtifactRetentionJournal):
    """The journal of a session opened with `mode="read"`: reads, refuses writes."""


def vault_from_environment(
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Return `open_session`'s vault keywords from the environment, if it names one.

    `$SPILLVAULT_ARTIFACTS` (`s3://bucket/prefix`) and `$SPILLVAULT_EVENT_STORE`
    (`postgresql://…`): what the CLI, `spillvault mcp serve` and the agent
    hooks open sessions with, so every host of a fleet finds the same vault.
    """
    env = os.environ if environ is None else environ
    artifacts = env.get(ARTIFACTS_ENV, "").strip()
    if not artifacts:
        return {}
    return {
        "artifacts": ObjectLocation.parse(artifacts),
        "event_store": env.get(EVENT_STORE_ENV, "").strip() or None,
    }


def artifact_store_for(session: Session) -> ArtifactStore:
    """Return a new store of the session's artifacts: its directory, or its vault."""
    if session.artifacts is not None:
        return ObjectArtifactStore(session, session.artifacts, s3_client())
    return LocalArtifactStore(session)


def open_session(  # noqa: PLR0913 - keyword-only injection points
    session_dir: str | os.PathLike[str],
    *,
    policy: SpillPolicy | None = None,
    event_store: str | None = None,
    fs: FileSystem | None = None,
    clock: Clock | None = None,
    recover: bool = True,
    safeguards: Safeguards | None = None,
    mode: SessionMode = "create",
    artifacts: str | ObjectLocation | None = None,
) -> Session:
    """Create or open the session at `session_dir` (see the module docstring).

    `mode="open"` and `mode="read"` never create one; "read" writes nothing
    and skips the recovery pass. `recover=False` skips that pass too, for
    inspection that must not change anything. `safeguards` is for planted-bug
    tests only (see `domain.safeguards`); every caller else leaves it out.
    `artifacts="s3://bucket/prefix"` opens the session of that name in a vault
    (see `open_vault_session`): `event_store` must then be PostgreSQL.
    """
    if mode not in get_args(SessionMode):
        msg = f"mode must be 'create', 'open' or 'read', not {mode!r}"
        raise ValueError(msg)
    fs = fs or OS_FILESYSTEM
    clock = clock or SYSTEM_CLOCK
    _check_event_store_argument(event_store)
    if artifacts is not None:
        location = (
            artifacts
            if isinstance(artifacts, ObjectLocation)
            else ObjectLocation.parse(artifacts)
        )
        return open_vault_session(
            os.path.basename(os.fspath(session_dir).rstrip("/")),
            location,
            event_store=event_store,
            policy=policy,
            clock=clock,
            recover=recover,
            safeguards=safeguards,
            mode=mode,
        )
    path = os.path.abspath(os.fspath(session_dir))
    parent, name = os.path.split(path)
    try:
        session_id = check_session_id(name)
    except ValueError as error:
        if mode != "create":
            raise _not_found(path, str(error)) from None
        raise ArtifactAccessError(str(error)) from None
    if mode == "create":
        _check_new_id_length(fs, path, session_id)
        dir_fd = _create_or_open_dir(fs, parent, name)
    else:
        dir_fd = _open_existing_dir(fs, parent, name, path)
    try:
        opener = _Opener(
            fs,
            clock,
            dir_fd=dir_fd,
            path=path,
            session_id=session_id,
            event_store=event_store,
        )
        lock, (store, store_id, kind) = _open_locked(opener, mode)
    except BaseException:
        fs.close(dir_fd)
        raise
    session = Session(
        path=path,
        session_id=session_id,
        store_id=store_id,
        store_kind=kind,
        store=store,
        lock=lock,
        fs=fs,
        clock=clock,
        dir_fd=dir_fd,
        policy=policy,
        safeguards=safeguards or Safeguards(),
        read_only=mode == "read",
    )
    try:
        if recover and mode != "read":
            session.recovery = recover_artifacts(session)
            session.journal.sync()
    except BaseException:
        session.close()
        raise
    return session


def open_vault_session(  # noqa: PLR0913 - keyword-only injection points
    session_id: str,
    location: ObjectLocation,
    *,
    event_store: str | None,
    policy: SpillPolicy | None = None,
    clock: Clock | None = None,
    recover: bool = True,
    safeguards: Safeguards | None = None,
    mode: SessionMode = "create",
) -> Session:
    """Open the session `session_id` of the vault at `location` from any host.

    A vault session has no directory: its events, lock and journal are in
    PostgreSQL (one schema per session, named from an id every host derives
    from the location and the session id), its artifacts are objects. Its
    store identity event is its marker: "open" and "read" demand it.
    """
    clock = clock or SYSTEM_CLOCK
    if event_store is None or not event_store.startswith(DSN_SCHEMES):
        msg = (
            f"artifacts in {location.url} need a PostgreSQL event store "
            "(event_store='postgresql://…' or $SPILLVAULT_EVENT_STORE): a SQLite "
            "or in-memory store is on one host, and every host must see the events"
        )
        raise ObjectStoreConfigError(msg)
    try:
        check_session_id(session_id)
    except ValueError as error:
        raise ArtifactAccessError(str(error)) from None
    if len(session_id) > MAX_SESSION_ID_LENGTH or not _VAULT_SESSION_ID.fullmatch(
        session_id
    ):
        msg = (
            f"vault session id {session_id[:100]!r}: at most "
            f"{MAX_SESSION_ID_LENGTH} letters, digits, '.', '_', '=' or '-'"
        )
        raise ArtifactAccessError(msg)
    store_id = uuid5(_VAULT_STORE_IDS, f"{location.url}\0{session_id}")
    backend = PostgresBackend(event_store, store_id)
    where = f"{location.url}/{session_id}"
    lock = advisory_lock_for(event_store, str(store_id))
    with lock:
        store = _open_vault_store(backend, session_id, str(store_id), clock, mode)
    session = Session(
        path=where,
        session_id=session_id,
        store_id=str(store_id),
        store_kind=PostgresBackend.kind,
        store=store,
        lock=lock,
        fs=OS_FILESYSTEM,
        clock=clock,
        dir_fd=-1,
        policy=policy,
        safeguards=safeguards or Safeguards(),
        read_only=mode == "read",
        artifacts=location,
        journal_opener=partial(JournalTable, event_store, schema_for(store_id)),
    )
    try:
        if recover and mode != "read":
            session.recovery = recover_artifacts(session)
            session.journal.sync()
    except BaseException:
        session.close()
        raise
    return session


_VAULT_SESSION_ID = re.compile(r"[A-Za-z0-9._=-]+")


def _open_vault_store(
    backend: PostgresBackend,
    session_id: str,
    store_id: str,
    clock: Clock,
    mode: SessionMode,
) -> SessionStore:
    """Open (or, for "create", make) a vault session's store under its lock."""
    if not backend.exists():
        if mode != "create":
            raise _not_found(backend.describe(), "no such session in the vault")
        backend.create()
    store = backend.open()
    try:
        if mode == "read":
            store.refuse_writes(f"session {session_id} is opened read-only")
        identity = store.store_identity()
        if identity is None:
            if mode != "create":
                raise _not_found(backend.describe(), "no store identity")
            if store.max_position():
                msg = f"{backend.describe()} holds events but no store identity"
                raise ArtifactLeaseJournalError(msg)
            now = format_timestamp(clock.now())
            store.record_identity(StoreIdentity.create(store_id, session_id, now))
        elif (identity.store_id, identity.session_id) != (store_id, session_id):
            msg = (
                f"{backend.describe()} is store {identity.store_id} of session "
                f"{identity.session_id!r}, not {store_id} of {session_id!r}"
            )
            raise ArtifactLeaseJournalError(msg)
    except BaseException:
        store.close()
        raise
    return store


def _open_locked(
    opener: _Opener, mode: SessionMode
) -> tuple[SessionLock, tuple[SessionStore, str, str]]:
    """Take the lock `mode` calls for and open (or create) the store under it."""
    if mode != "create":
        # Validated before the lock: taking it may create `.lock`.
        opener.require_marker()
    if mode == "read":
        lock = SessionLock(opener.fs, opener.dir_fd, on_disk=False)
    else:
        lock = session_lock_for(opener.fs, opener.dir_fd)
    _acquire(lock, opener.path)
    try:
        if mode == "create":
            return lock, opener.open_or_create()
        return lock, opener.open_existing(read_only=mode == "read")
    finally:
        lock.release()


_PARENT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _check_new_id_length(fs: FileSystem, path: str, session_id: str) -> None:
    """Refuse a new session whose handles would pass the 64-character bound."""
    if len(session_id) <= MAX_SESSION_ID_LENGTH:
        return
    try:
        fs.lstat(os.path.join(path, MARKER_NAME))
    except (FileNotFoundError, NotADirectoryError):
        msg = (
            f"session id {session_id[:100]!r} is {len(session_id)} characters: a new "
            f"session's id is at most {MAX_SESSION_ID_LENGTH}, so that its handles "
            f"(<session-id>/<number>) stay within {MAX_HANDLE_LENGTH}"
        )
        raise ArtifactAccessError(msg) from None


def _create_or_open_dir(fs: FileSystem, parent: str, name: str) -> int:
    try:
        parent_fd = fs.open(parent, _PARENT_FLAGS)
    except FileNotFoundError:
        _make_parents(fs, parent)
        parent_fd = fs.open(parent, _PARENT_FLAGS)
    try:
        return open_private_dir(fs, name, dir_fd=parent_fd, what="session directory")
    finally:
        fs.close(parent_fd)


def _make_parents(fs: FileSystem, parent: str) -> None:
    """Create the missing directories above a new session, as `mkdir -p` would.

    Each is private (0700) and its entry is fsynced into its own parent, so an
    acknowledged artifact below it cannot vanish with an undurable ancestor.
    """
    missing = []
    path = parent
    while True:
        try:
            fs.close(fs.open(path, _PARENT_FLAGS))
            break
        except FileNotFoundError:
            missing.append(path)
            path = os.path.dirname(path)
    for directory in reversed(missing):
        with suppress(FileExistsError):  # another process made it meanwhile
            fs.mkdir(directory, 0o700)
        above = fs.open(os.path.dirname(directory), _PARENT_FLAGS)
        try:
            fs.fsync(above)
        finally:
            fs.close(above)


def _open_existing_dir(fs: FileSystem, parent: str, name: str, path: str) -> int:
    """Open a session directory that has a marker; create and change nothing."""
    try:
        parent_fd = fs.open(parent, _PARENT_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        raise _not_found(path, "no such directory") from None
    try:
        dir_fd = fs.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        raise _not_found(path, "no such directory") from None
    except OSError as error:
        if error.errno == errno.ENOTDIR:
            raise _not_found(path, "not a directory") from None
        if error.errno == errno.ELOOP:
            msg = "session directory is a symlink or not a directory"
            raise ArtifactAccessError(msg) from error
        raise
    finally:
        fs.close(parent_fd)
    try:
        # The marker first: a directory that is no session (a home directory,
        # say) is reported as such, whatever its permissions.
        if not exists(fs, MARKER_NAME, dir_fd=dir_fd):
            raise _not_found(path, f"no {MARKER_NAME}")
        check_private(fs, dir_fd, "session directory", directory=True)
    except BaseException:
        fs.close(dir_fd)
        raise
    return dir_fd


def _not_found(path: str, why: str) -> ArtifactSessionNotFoundError:
    return ArtifactSessionNotFoundError(f"no spillvault session at {path} ({why})")


def _acquire(lock: SessionLock, path: str) -> None:
    """Take the session lock; a session we may not write is refused by name."""
    try:
        lock.acquire()
    except OSError as error:
        if error.errno not in _READ_ONLY_ERRNOS:
            raise
        msg = (
            f"session {path} is read-only ({error.strerror}: cannot write "
            f"{LOCK_NAME}); open it with mode='read' to read it"
        )
        raise ArtifactSessionReadOnlyError(msg) from error


def _check_event_store_argument(event_store: str | None) -> None:
    if event_store is None or event_store == "memory":
        return
    if isinstance(event_store, str) and event_store.startswith(DSN_SCHEMES):
        return
    msg = "event_store must be None (SQLite), 'memory' or a postgresql:// DSN"
    raise ValueError(msg)


def _store_kind(event_store: str | None) -> str:
    if event_store is None:
        return SQLiteBackend.kind
    if event_store == "memory":
        return MemoryBackend.kind
    return PostgresBackend.kind


def derive_store_id(fs: FileSystem, dir_fd: int, path: str) -> UUID:
    """Name a new store after the session directory's identity on this host."""
    info = fs.fstat(dir_fd)
    host = socket.gethostname()
    return uuid5(_STORE_IDS, f"{host}\0{path}\0{info.st_dev}\0{info.st_ino}")


class _Opener:
    """Runs S4.4's creation and opening rules under the session lock."""

    def __init__(  # noqa: PLR0913 - one call site, all needed
        self,
        fs: FileSystem,
        clock: Clock,
        *,
        dir_fd: int,
        path: str,
        session_id: str,
        event_store: str | None,
    ) -> None:
        self.fs = fs
        self.clock = clock
        self.dir_fd = dir_fd
        self.path = path
        self.session_id = session_id
        self.event_store = event_store

    def backend(self, store_id: UUID) -> EventStoreBackend:
        kind = _store_kind(self.event_store)
        if kind == SQLiteBackend.kind:
            return SQLiteBackend(self.fs, self.dir_fd, self.path)
        if kind == MemoryBackend.kind:
            return MemoryBackend(self.fs, self.dir_fd, self.path)
        assert self.event_store is not None  # noqa: S101 - kind says DSN
        return PostgresBackend(self.event_store, store_id)

    def open_or_create(self) -> tuple[SessionStore, str, str]:
        self.ensure_layout()
        marker = self.read_marker()
        if marker is not None:
            return self.open_marked(marker)
        return self.finish_creation()

    def require_marker(self) -> dict[str, Any]:
        marker = self.read_marker()
        if marker is None:
            raise _not_found(self.path, f"no {MARKER_NAME}")
        return marker

    def open_existing(self, *, read_only: bool) -> tuple[SessionStore, str, str]:
        marker = self.require_marker()
        if read_only:
            return self.open_marked(marker, read_only=True)
        self.ensure_layout()
        return self.open_marked(marker)

    def ensure_layout(self) -> None:
        for name in (TOOL_RESULTS_DIR, QUARANTINE_DIR):
            self.fs.close(open_private_dir(self.fs, name, dir_fd=self.dir_fd))

    def open_marked(
        self, marker: dict[str, Any], *, read_only: bool = False
    ) -> tuple[SessionStore, str, str]:
        kind = _store_kind(self.event_store)
        if marker["event_store"] != kind:
            msg = (
                f"session {self.session_id!r} was created with the "
                f"{marker['event_store']} event store, not {kind}"
            )
            raise ArtifactLeaseJournalError(msg)
        store_id = marker["store_id"]
        backend = self.backend(UUID(store_id))
        if not backend.exists():
            msg = f"event store missing: {backend.describe()} (marker names {store_id})"
            raise ArtifactLeaseJournalError(msg)
        if read_only and isinstance(backend, SQLiteBackend):
            store = backend.open_read_only()
        else:
            store = backend.open()
        if read_only:
            store.refuse_writes(
                f"session {self.path} is opened read-only: cannot record events"
            )
        try:
            identity = store.store_identity()
            if identity is None:
                msg = f"event store is empty but the marker names store {store_id}"
                raise ArtifactLeaseJournalError(msg)
            if identity.store_id != store_id:
                msg = (
                    f"event store mismatch: {backend.describe()} is store "
                    f"{identity.store_id}, the marker names {store_id}"
                )
                raise ArtifactLeaseJournalError(msg)
        except BaseException:
            store.close()
            raise
        return store, store_id, kind

    def finish_creation(self) -> tuple[SessionStore, str, str]:
        derived = derive_store_id(self.fs, self.dir_fd, self.path)
        backend = self.backend(derived)
        evidence = self.evidence()
        if backend.exists():
            store = backend.open()
        elif evidence:
            msg = f"session marker and event store missing while {evidence} exist"
            raise ArtifactLeaseJournalError(msg)
        else:
            backend.create()
            store = backend.open()
        try:
            store_id = self.ensure_identity(
                store, derived, evidence, backend.describe()
            )
            self.write_marker(store_id, backend.kind)
        except BaseException:
            store.close()
            raise
        return store, store_id, backend.kind

    def ensure_identity(
        self, store: SessionStore, derived: UUID, evidence: str, where: str
    ) -> str:
        identity = store.store_identity()
        recorded = store.max_position() - (0 if identity is None else 1)
        if recorded > 0 or evidence:
            what = evidence or f"{recorded} events in {where}"
            msg = f"session marker {MARKER_NAME} missing while {what} exist"
            raise ArtifactLeaseJournalError(msg)
        if identity is None:
            store_id = str(derived)
            now = format_timestamp(self.clock.now())
            store.record_identity(StoreIdentity.create(store_id, self.session_id, now))
            return store_id
        if identity.session_id != self.session_id:
            msg = (
                f"event store belongs to session {identity.session_id!r}, "
                f"not {self.session_id!r}"
            )
            raise ArtifactLeaseJournalError(msg)
        return identity.store_id

    def evidence(self) -> str:
        """Name what exists that only a created session could have written."""
        found = [
            what
            for name, what in (
                (TOOL_RESULTS_DIR, "artifacts"),
                (QUARANTINE_DIR, "quarantined files"),
            )
            if self.has_entries(name)
        ]
        if exists(self.fs, RETENTION_JOURNAL_NAME, dir_fd=self.dir_fd):
            found.append("a journal")
        return " and ".join(found)

    def has_entries(self, directory: str) -> bool:
        fd = self.fs.open(directory, DIR_FLAGS, dir_fd=self.dir_fd)
        try:
            return bool(self.fs.listdir(fd))
        finally:
            self.fs.close(fd)

    def read_marker(self) -> dict[str, Any] | None:
        if not exists(self.fs, MARKER_NAME, dir_fd=self.dir_fd):
            return None
        raw = read_private_file(
            self.fs, MARKER_NAME, dir_fd=self.dir_fd, limit=MARKER_LIMIT
        )
        try:
            marker = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            msg = f"session marker {MARKER_NAME} is damaged: {error}"
            raise ArtifactLeaseJournalError(msg) from None
        problems = _marker_problems(marker, self.session_id)
        if problems:
            msg = f"session marker {MARKER_NAME} is invalid: {problems}"
            raise ArtifactLeaseJournalError(msg)
        return dict(marker)

    def write_marker(self, store_id: str, kind: str) -> None:
        marker = {
            "format": MARKER_FORMAT,
            "layout_version": STORE_LAYOUT_VERSION,
            "session_id": self.session_id,
            "store_id": store_id,
            "event_store": kind,
            "created_at": format_timestamp(self.clock.now()),
        }
        data = json.dumps(marker, sort_keys=True, separators=(",", ":")) + "\n"
        write_new_file(self.fs, MARKER_NAME, data.encode("ascii"), dir_fd=self.dir_fd)


def _marker_problems(marker: object, session_id: str) -> str:  # noqa: PLR0911
    if not isinstance(marker, dict):
        return "not a JSON object"
    if marker.get("format") != MARKER_FORMAT:
        return f"format is {marker.get('format')!r}"
    if marker.get("layout_version") != STORE_LAYOUT_VERSION:
        return f"unsupported layout_version {marker.get('layout_version')!r}"
    if marker.get("session_id") != session_id:
        return f"it names session {marker.get('session_id')!r}, not {session_id!r}"
    if marker.get("event_store") not in {"sqlite", "memory", "postgresql"}:
        return f"unknown event_store {marker.get('event_store')!r}"
    try:
        UUID(str(marker.get("store_id")))
    except ValueError:
        return f"bad store_id {marker.get('store_id')!r}"
    return ""


__all__ = [
    "ARTIFACTS_ENV",
    "EVENT_STORE_ENV",
    "LOCK_NAME",
    "MARKER_NAME",
    "Session",
    "SessionMode",
    "artifact_store_for",
    "open_session",
    "open_vault_session",
    "vault_from_environment",
]
