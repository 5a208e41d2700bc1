"""CrashFS: the filesystem seam with fault injection and crash simulation (issue 6).

`CrashFS(root, seed=...)` is the real seam (`OsFileSystem`, so every call still
reaches the kernel) plus bookkeeping. It plays the part of SQLite's crash VFS
(`src/test6.c`) and I/O-error hooks (`io_error_pending` / `io_error_persist`)
for the files the project writes itself.

Counting
    Every call that mutates or syncs is a *step*, numbered from 1: `write`,
    `fsync`, `ftruncate`, `fchmod`, `mkdir`, `link`, `rename`, `unlink`,
    `rmdir`, and `open` with `O_CREAT` or `O_TRUNC` (whether or not it creates),
    plus `mark(label)`, a named crash point that does nothing and takes no fault.
    `read`, `pread`, `fstat`, `lstat`, `listdir`, `flock` and `close` are not
    steps. A step counts whether it succeeds, fails for real or fails by
    injection, and is logged in `steps`. Calls outside `root` count too (they
    go through the seam) but are not tracked for the rebuild.

Faults (`inject`)
    From step `at` on, the first step whose kind is in `ops` (default: any
    step; writes only for a short write) raises `OSError(errno)` without doing
    anything, or (`"short"`) writes only part of the data. Transient faults fire
    once; persistent ones on every matching step from then on.

Crash (`crash_at=N`, `crash()`)
    At step N the layer raises `SimulatedCrash` (a `BaseException`, so no
    `except Exception` of the code under test catches it) *before* doing the
    step: the image holds steps 1..N-1. From then on the process is dead to the
    layer: every seam call raises `SimulatedCrash`, except `close`, which does
    nothing (the layer closed every descriptor it opened when it crashed, which
    also drops their flocks). `crash()` crashes after the last step.

Rebuild (`rebuild(choice)`)
    Rewrites the tree under `root` in place as a power cut could have left it:

    - A regular file starts from its bytes at its last `fsync` (snapshotted
      from the file then), or, if never fsynced, from the bytes it had when
      the layer first saw it (empty for a file the layer saw created). Each
      later `write` / `ftruncate` ("pending op", in step order) gets one of
      `CHOICES`: written; dropped; torn (only the part before a 4 KiB-aligned
      file offset inside the write lands: nothing if the write spans no such
      boundary); zero (the range reads as zeros); garbage (seeded random
      bytes). A truncate is applied unless dropped. Pending ops land
      independently unless `sequential=True` (a file keeps a prefix of them).
    - A directory entry created, linked, renamed or unlinked since its
      directory's last `fsync` reverts to what the name held then (absent, or
      the earlier file, whose content is rebuilt the same way). With
      `dir_entries="kept"` they all survive; `"random"` decides per entry.
      A rename between two directories is kept or undone as a unit: an
      `fsync` of either directory makes both sides durable (ext4 commits it
      in one journal transaction; POSIX promises less).
    - Everything else is taken as it is now.

    `choice` is None (seeded RNG), one of `CHOICES` for every pending op, a
    sequence with one choice per pending op (`pending_ops()` lists them), or a
    callable `(PendingOp, random.Random) -> choice`. The returned
    `RebuildReport` holds every decision; `RebuildReport.choices` replays it.

Time (`clock=`)
    Given a clock (anything with `now()`), every write, truncate and creating
    open stamps the file's mtime from it instead of the kernel's time, so a
    test on a fake clock sees file ages from that one clock (GC's orphan TTL
    reads mtimes, S6.1) and passes on any real date.

Seeds and replay
    Every random decision comes from `random.Random(seed)`; `describe()` and
    every `SimulatedCrash` name the seed, crash step and faults, and `report()`
    adds the step log, so a failing case replays exactly from them.

Limits (the model is simple on purpose)
    - Only operations through this seam are tracked. Files under `root` the
      layer never saw are taken as they are; so are names matching `exclude`
      (by default `events.sqlite3*`, at any depth):
      per the crash model, the event store's committed state is kept as is,
      since crash points inside SQLite are out of scope.
    - `root` itself always survives (its own entry lives in its parent); its
      inode is kept, every other directory and file is re-created (new inode
      numbers; modes and file mtimes are kept; owners are the caller's).
    - Metadata other than names (mode, mtime, size growth apart from the
      written bytes) is not modelled as volatile; `fchmod` always survives.
    - Per-sector trashing of *synced* data, lying fsyncs, dropped dirty pages
      after a failed fsync (the ext4/XFS behaviour from Rebello et al.) and
      reordering between files are not modelled, except that files are
      independent of each other.
    - Inode numbers are mapped to tracked files; a file created outside the
      seam that reuses a freed inode number of a tracked one is mistaken for
      it (files created through the seam always get a fresh identity).
    - Directories appearing twice in the rebuilt namespace (a reverted
      directory rename) are materialized once; FIFOs, sockets and devices are
      left out of the rebuilt tree (listed in `RebuildReport.skipped`).
"""

from __future__ import annotations

import contextlib
import errno as errno_module
import fcntl
import fnmatch
import os
import random
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from spillvault.adapters.storage.fs import OsFileSystem

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from spillvault.domain.ports import Clock

CHOICES = ("written", "dropped", "torn", "zero", "garbage")
SECTOR = 4096
DEFAULT_EXCLUDE = ("events.sqlite3*",)
COUNTED = frozenset(
    {
        "write",
        "fsync",
        "ftruncate",
        "fchmod",
        "mkdir",
        "link",
        "rename",
        "unlink",
        "rmdir",
        "open",
        "mark",
    }
)
"""Step kinds (`open` only with O_CREAT or O_TRUNC)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FAULTABLE = COUNTED - {"mark"}

Choice = Literal["written", "dropped", "torn", "zero", "garbage"]
DirEntries = Literal["lost", "kept", "random"]


class SimulatedCrash(BaseException):
    """The simulated process death; carries what replays it."""

    def __init__(self, message: str, *, seed: int, step: int) -> None:
        super().__init__(message)
        self.seed = seed
        self.step = step


@dataclass
class Fault:
    """An injected failure: an errno, or `"short"` for a short write."""

    at: int
    error: int | Literal["short"]
    persistent: bool = False
    ops: frozenset[str] | None = None
    fired: int = 0

    def matches(self, index: int, op: str) -> bool:
        """Say whether this fault hits step `index` of kind `op`."""
        ops = self.ops
        if ops is None:
            ops = frozenset({"write"}) if self.error == "short" else FAULTABLE
        if index < self.at or op not in ops:
            return False
        return self.persistent or self.fired == 0

    def describe(self) -> str:
        """Return the fault as the `inject` call that recreates it."""
        error = (
            repr(self.error)
            if self.error == "short"
            else f"errno.{errno_module.errorcode[self.error]}"
        )
        ops = "" if self.ops is None else f", ops={sorted(self.ops)!r}"
        return f"inject({self.at}, {error}, persistent={self.persistent}{ops})"


@dataclass
class Step:
    """One counted call: its number, kind, target and outcome."""

    index: int
    op: str
    detail: str
    outcome: str = "ok"

    def __str__(self) -> str:
        return f"#{self.index} {self.op} {self.detail} -> {self.outcome}"


@dataclass(frozen=True)
class PendingOp:
    """A write or truncate not yet covered by an fsync of its file."""

    step: int
    kind: Literal["write", "truncate"]
    path: str
    offset: int
    data: bytes = b""
    node: int = 0

    def __str__(self) -> str:
        if self.kind == "truncate":
            return f"#{self.step} truncate {self.path} to {self.offset}"
        return f"#{self.step} write {self.path} [{self.offset}, +{len(self.data)})"


@dataclass
class _Undo:
    prev: int | None
    step: int


@dataclass
class _Node:
    id: int
    kind: str  # "file" | "dir" | "symlink" | "other"
    mode: int
    mtime_ns: int
    path: str
    durable: bytes = b""
    pending: list[PendingOp] = field(default_factory=list)
    target: str = ""
    undo: dict[str, _Undo] = field(default_factory=dict)


@dataclass
class _Rename:
    step: int
    src_dir: int
    src_name: str
    dst_dir: int
    dst_name: str


@dataclass
class RebuildReport:
    """What one rebuild decided: replay it with `rebuild(report.choices)`."""

    seed: int
    decisions: list[tuple[PendingOp, str]]
    reverted: list[str]
    skipped: list[str]

    @property
    def choices(self) -> list[str]:
        """The per-op choices, in the order `rebuild` takes them."""
        return [choice for _, choice in self.decisions]

    def __str__(self) -> str:
        lines = [f"rebuild seed={self.seed}"]
        lines += [f"  {op} -> {choice}" for op, choice in self.decisions]
        lines += [f"  reverted entry {name}" for name in self.reverted]
        lines += [f"  skipped {name}" for name in self.skipped]
        return "\n".join(lines)


def _read_fd(fd: int) -> bytes:
    """Return all bytes of the file behind `fd`, whatever its access mode."""
    reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _read_all(reader)
    finally:
        os.close(reader)


def _read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _read_path(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return _read_all(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes, mode: int, mtime_ns: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def _empty(directory: str) -> None:
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


class CrashFS(OsFileSystem):
    """The real seam, counted, with injected faults and a simulated crash."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        seed: int | None = None,
        crash_at: int | None = None,
        sequential: bool = False,
        exclude: Iterable[str] = DEFAULT_EXCLUDE,
        clock: Clock | None = None,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.clock = clock
        self.seed = secrets.randbelow(2**32) if seed is None else seed
        self.crash_at = crash_at
        self.sequential = sequential
        self.exclude = tuple(exclude)
        self.count = 0
        self.steps: list[Step] = []
        self.faults: list[Fault] = []
        self.crashed = False
        self.crash_step: int | None = None
        self._nodes: dict[int, _Node] = {}
        self._ids: dict[tuple[int, int], int] = {}
        self._fds: dict[int, str] = {}
        self._renames: list[_Rename] = []
        self.on_close: Callable[[str], None] | None = None

    # configuration ----------------------------------------------------------

    def inject(
        self,
        at: int,
        error: int | Literal["short"],
        *,
        persistent: bool = False,
        ops: Iterable[str] | None = None,
    ) -> Fault:
        """Fail the first matching step from step `at` on (or all, if persistent)."""
        fault = Fault(at, error, persistent, None if ops is None else frozenset(ops))
        self.faults.append(fault)
        return fault

    def describe(self) -> str:
        """Return the constructor and injections that replay this run."""
        faults = "".join(f".{fault.describe()}" for fault in self.faults)
        crash_at = self.crash_at if self.crash_at is not None else self.crash_step
        return (
            f"CrashFS({self.root!r}, seed={self.seed}, crash_at={crash_at}, "
            f"sequential={self.sequential}){faults}"
        )

    def report(self) -> str:
        """Return the replay line, the crash step and the whole step log."""
        crash = "" if self.crash_step is None else f" crashed at step {self.crash_step}"
        lines = [f"{self.describe()}{crash}; {self.count} steps"]
        lines += [f"  {step}" for step in self.steps]
        return "\n".join(lines)

    # bookkeeping ------------------------------------------------------------

    def _excluded(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.exclude)

    def _inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + "/")

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.root) if path != self.root else "."

    def _tracked(self, path: str) -> bool:
        """Say whether the entry at absolute `path` is modelled."""
        if not self._inside(path):
            return False
        if path == self.root:
            return True
        rel = os.path.relpath(path, self.root)
        return not any(self._excluded(part) for part in rel.split("/"))

    def _abs(self, path: str, dir_fd: int | None) -> str:
        base = os.getcwd() if dir_fd is None else os.readlink(f"/proc/self/fd/{dir_fd}")
        return os.path.normpath(os.path.join(base, os.fspath(path)))

    def _new_node(self, st: os.stat_result, path: str, content: bytes = b"") -> int:
        node_id = len(self._nodes) + 1
        self._nodes[node_id] = _Node(
            node_id,
            _kind(st.st_mode),
            stat.S_IMODE(st.st_mode),
            st.st_mtime_ns,
            self._rel(path),
            durable=content,
        )
        self._ids[st.st_dev, st.st_ino] = node_id
        return node_id

    def _capture(self, path: str, st: os.stat_result, fd: int | None = None) -> int:
        """Return the node of an entry, taking its present state if unseen."""
        known = self._ids.get((st.st_dev, st.st_ino))
        if known is not None:
            return known
        content = b""
        if stat.S_ISREG(st.st_mode):
            content = _read_fd(fd) if fd is not None else _read_path(path)
        node_id = self._new_node(st, path, content)
        if stat.S_ISLNK(st.st_mode):
            self._nodes[node_id].target = os.readlink(path)
        return node_id

    def _entry(self, path: str) -> int | None:
        """Return the node named by absolute `path` now, or None if absent."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return self._capture(path, st)

    def _touch(self, path: str, step: int) -> None:
        """Remember what `path` names before a directory operation changes it."""
        parent, name = os.path.split(path)
        if not self._tracked(path) or path == self.root:
            return
        dir_id = self._entry(parent)
        if dir_id is None:
            return
        undo = self._nodes[dir_id].undo
        if name not in undo:
            undo[name] = _Undo(self._entry(path), step)

    def _fd_node(self, fd: int) -> int | None:
        """Return the tracked node behind `fd`, or None if not modelled."""
        path = self._fds.get(fd) or os.readlink(f"/proc/self/fd/{fd}")
        if not self._tracked(path):
            return None
        return self._capture(path, os.fstat(fd), fd)

    def _step(self, op: str, detail: str) -> tuple[Step, bool]:
        """Count a step; crash or raise an injected errno; say if it is short."""
        if self.crashed:
            self._dead()
        self.count += 1
        step = Step(self.count, op, detail)
        self.steps.append(step)
        if self.crash_at is not None and self.count >= self.crash_at:
            step.outcome = "crash"
            self.crash(_at=self.count)
            self._dead()
        short = False
        for fault in self.faults:
            if not fault.matches(step.index, op):
                continue
            fault.fired += 1
            if fault.error == "short":
                short = True
                continue
            step.outcome = f"injected {errno_module.errorcode[fault.error]}"
            raise OSError(fault.error, os.strerror(fault.error))
        return step, short

    def _stamp(self, fd: int) -> None:
        """Set the file's mtime from the clock, when there is one."""
        if self.clock is not None:
            stamp = (self.clock.now() - _EPOCH) // timedelta(microseconds=1) * 1000
            os.utime(fd, ns=(stamp, stamp))

    def _dead(self) -> None:
        msg = f"simulated crash at step {self.crash_step} (replay: {self.describe()})"
        raise SimulatedCrash(msg, seed=self.seed, step=self.crash_step or 0)

    def _check_alive(self) -> None:
        if self.crashed:
            self._dead()

    @staticmethod
    def _outcome(step: Step, error: OSError) -> None:
        step.outcome = errno_module.errorcode.get(error.errno or 0, str(error))

    # markers and sync -----------------------------------------------------------

    def mark(self, label: str) -> None:
        """Count a step that does nothing: a crash point the code names.

        The harness hooks it to the journal's `_checkpoint`, so a crash can land
        between two changes that touch no file (e.g. an owner tombstone and the
        store's ABORTED event, S5.3).
        """
        self._step("mark", label)

    def sync(self) -> None:
        """Make everything under `root` durable, as `sync(2)` would."""
        self._check_alive()
        self._nodes.clear()
        self._ids.clear()
        self._renames.clear()

    # crash --------------------------------------------------------------------

    def crash(self, *, _at: int | None = None) -> None:
        """Die now: close every descriptor opened through the layer.

        `crash_step` becomes the first step not performed, so
        `crash_at=crash_step` replays the same image.
        """
        if self.crashed:
            return
        self.crashed = True
        self.crash_step = self.count + 1 if _at is None else _at
        for fd in list(self._fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def pending_ops(self) -> list[PendingOp]:
        """Return every write or truncate not covered by an fsync, in step order."""
        ops = [op for node in self._nodes.values() for op in node.pending]
        return sorted(ops, key=lambda op: op.step)

    def rebuild(
        self,
        choice: str
        | Sequence[str]
        | Callable[[PendingOp, random.Random], str]
        | None = None,
        *,
        dir_entries: DirEntries = "lost",
    ) -> RebuildReport:
        """Crash (if not yet) and rewrite `root` as the crash left it."""
        self.crash()
        rng = random.Random(self.seed)  # noqa: S311 - simulation, not secrets
        decisions = self._decide(choice, rng)
        report = RebuildReport(self.seed, decisions, [], [])
        if not os.path.isdir(self.root):
            return report
        chosen = {op.step: made for op, made in decisions}
        root_id, current, excluded, stats = self._walk()
        entries = self._target(root_id, current, dir_entries, rng, report)
        contents = {
            node_id: self._content(self._nodes[node_id], chosen, rng)
            for _, node_id in entries
            if self._nodes[node_id].kind == "file"
        }
        self._materialize(entries, contents, excluded, stats, report)
        return report

    def _decide(
        self,
        choice: str | Sequence[str] | Callable[[PendingOp, random.Random], str] | None,
        rng: random.Random,
    ) -> list[tuple[PendingOp, str]]:
        ops = self.pending_ops()
        if choice is None:
            made = [rng.choice(CHOICES) for _ in ops]
        elif isinstance(choice, str):
            made = [choice] * len(ops)
        elif callable(choice):
            made = [choice(op, rng) for op in ops]
        else:
            made = list(choice)
            if len(made) != len(ops):
                msg = f"{len(made)} choices for {len(ops)} pending ops"
                raise ValueError(msg)
        for item in made:
            if item not in CHOICES:
                msg = f"unknown choice {item!r} (one of {CHOICES})"
                raise ValueError(msg)
        if self.sequential:
            broken: set[int] = set()
            for index, op in enumerate(ops):
                if op.node in broken:
                    made[index] = "dropped"
                elif made[index] != "written":
                    broken.add(op.node)
        return list(zip(ops, made, strict=True))

    def _walk(
        self,
    ) -> tuple[
        int,
        dict[int, dict[str, int]],
        dict[int, list[str]],
        dict[int, os.stat_result],
    ]:
        current: dict[int, dict[str, int]] = {}
        excluded: dict[int, list[str]] = {}
        stats: dict[int, os.stat_result] = {}
        root_id = self._capture(self.root, os.lstat(self.root))
        stack = [(self.root, root_id)]
        while stack:
            path, dir_id = stack.pop()
            listing: dict[str, int] = {}
            with os.scandir(path) as entries:
                for entry in entries:
                    if self._excluded(entry.name):
                        excluded.setdefault(dir_id, []).append(entry.path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                    node_id = self._capture(entry.path, st)
                    listing[entry.name] = node_id
                    stats.setdefault(node_id, st)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append((entry.path, node_id))
            current[dir_id] = listing
        return root_id, current, excluded, stats

    def _target(
        self,
        root_id: int,
        current: dict[int, dict[str, int]],
        dir_entries: DirEntries,
        rng: random.Random,
        report: RebuildReport,
    ) -> list[tuple[str, int]]:
        """Return (relative path, node) of the rebuilt tree, parents first."""
        kept_steps: dict[int, bool] = {}

        def keep(undo: _Undo) -> bool:
            if dir_entries == "kept":
                return True
            if dir_entries == "lost":
                return False
            if undo.step not in kept_steps:
                kept_steps[undo.step] = rng.random() < 0.5
            return kept_steps[undo.step]

        out: list[tuple[str, int]] = [(".", root_id)]
        seen = {root_id}
        queue = [(".", root_id)]
        while queue:
            rel, dir_id = queue.pop(0)
            listing = dict(current.get(dir_id, {}))
            for name, undo in sorted(self._nodes[dir_id].undo.items()):
                if keep(undo):
                    continue
                if listing.get(name) != undo.prev:
                    report.reverted.append(os.path.normpath(os.path.join(rel, name)))
                if undo.prev is None:
                    listing.pop(name, None)
                else:
                    listing[name] = undo.prev
            for name in sorted(listing):
                node_id = listing[name]
                child = os.path.normpath(os.path.join(rel, name))
                if self._nodes[node_id].kind == "dir":
                    if node_id in seen:
                        report.skipped.append(f"{child} (directory seen twice)")
                        continue
                    seen.add(node_id)
                    queue.append((child, node_id))
                out.append((child, node_id))
        return out

    def _content(
        self, node: _Node, chosen: dict[int, str], rng: random.Random
    ) -> bytes:
        data = bytearray(node.durable)
        for op in node.pending:
            made = chosen[op.step]
            if op.kind == "truncate":
                if made != "dropped":
                    del data[op.offset :]
                    data.extend(bytes(max(0, op.offset - len(data))))
                continue
            payload = op.data
            if made == "dropped":
                continue
            if made == "torn":
                first = -(-(op.offset + 1) // SECTOR) * SECTOR
                cuts = range(first, op.offset + len(payload), SECTOR)
                if not cuts:
                    continue
                payload = payload[: rng.choice(cuts) - op.offset]
            elif made == "zero":
                payload = bytes(len(payload))
            elif made == "garbage":
                payload = rng.randbytes(len(payload))
            if len(data) < op.offset:
                data.extend(bytes(op.offset - len(data)))
            data[op.offset : op.offset + len(payload)] = payload
        return bytes(data)

    def _materialize(
        self,
        entries: list[tuple[str, int]],
        contents: dict[int, bytes],
        excluded: dict[int, list[str]],
        stats: dict[int, os.stat_result],
        report: RebuildReport,
    ) -> None:
        """Build the tree in a staging directory, then swap it into `root`."""
        parent, base = os.path.split(self.root)
        staging = os.path.join(parent, f".{base}.crashfs-rebuild")
        if os.path.lexists(staging):
            shutil.rmtree(staging)
        os.mkdir(staging, 0o700)
        made: dict[int, str] = {}
        dirs: list[tuple[str, int]] = []
        rel_of_dir: dict[int, str] = {}
        for rel, node_id in entries:
            node = self._nodes[node_id]
            st = stats.get(node_id)
            mode = stat.S_IMODE(st.st_mode) if st is not None else node.mode
            target = os.path.normpath(os.path.join(staging, rel))
            if node.kind == "dir":
                rel_of_dir[node_id] = rel
                if rel != ".":
                    os.mkdir(target, 0o700)
                    dirs.append((target, mode))
            elif node.kind == "file" and node_id in made:
                os.link(made[node_id], target)
            elif node.kind == "file":
                mtime = st.st_mtime_ns if st is not None else node.mtime_ns
                _write_file(target, contents[node_id], mode, mtime)
                made[node_id] = target
            elif node.kind == "symlink":
                os.symlink(node.target, target)
            else:
                report.skipped.append(f"{rel} (not a file, directory or symlink)")
        self._carry_excluded(excluded, rel_of_dir, staging, report)
        for target, mode in reversed(dirs):
            os.chmod(target, mode)
        _empty(self.root)
        for name in os.listdir(staging):
            os.rename(os.path.join(staging, name), os.path.join(self.root, name))
        os.rmdir(staging)

    def _carry_excluded(
        self,
        excluded: dict[int, list[str]],
        rel_of_dir: dict[int, str],
        staging: str,
        report: RebuildReport,
    ) -> None:
        """Move the excluded entries (kept as they are) into the staging tree."""
        for dir_id, paths in excluded.items():
            if dir_id not in rel_of_dir:
                report.skipped.extend(f"{self._rel(p)} (directory gone)" for p in paths)
                continue
            for path in paths:
                name = os.path.basename(path)
                os.rename(path, os.path.join(staging, rel_of_dir[dir_id], name))

    # the seam ---------------------------------------------------------------

    def open(  # type: ignore[override]
        self, path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        """Open; a step if O_CREAT or O_TRUNC (a created file is tracked empty)."""
        self._check_alive()
        full = self._abs(path, dir_fd)
        if not flags & (os.O_CREAT | os.O_TRUNC):
            fd = os.open(path, flags, mode, dir_fd=dir_fd)
            self._fds[fd] = full
            return fd
        step, _ = self._step("open", self._rel(full))
        tracked = self._tracked(full)
        before = self._entry(full) if tracked else None
        if tracked and flags & os.O_CREAT and before is None:
            self._touch(full, step.index)
        try:
            fd = os.open(path, flags, mode, dir_fd=dir_fd)
        except OSError as error:
            self._outcome(step, error)
            raise
        self._fds[fd] = full
        self._stamp(fd)
        if tracked:
            st = os.fstat(fd)
            if before is None:
                self._new_node(st, full)
                step.outcome = "created"
            elif flags & os.O_TRUNC:
                node = self._nodes[before]
                node.pending.append(
                    PendingOp(step.index, "truncate", node.path, 0, node=node.id)
                )
        return fd

    def close(self, fd: int) -> None:
        """Close; after a crash, nothing (the layer closed its descriptors).

        `on_close(path)`, when set, runs after each close: an interleaving
        test starts a competing operation there (issue 7).
        """
        if self.crashed:
            return
        path = self._fds.pop(fd, None)
        os.close(fd)
        if self.on_close is not None and path is not None:
            self.on_close(self._rel(path))

    def read(self, fd: int, size: int) -> bytes:
        """Read (not a step)."""
        self._check_alive()
        return os.read(fd, size)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """Read at an offset (not a step)."""
        self._check_alive()
        return os.pread(fd, size, offset)

    def write(self, fd: int, data: bytes) -> int:  # type: ignore[override]
        """Write, remembering the bytes until the file's next fsync."""
        step, short = self._step("write", f"fd {fd} {len(data)} bytes")
        node_id = self._fd_node(fd)
        if short and len(data) > 1:
            data = data[: len(data) // 2]
            step.outcome = f"short {len(data)}"
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
            offset = os.fstat(fd).st_size
        else:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
        try:
            written = os.write(fd, data)
        except OSError as error:
            self._outcome(step, error)
            raise
        self._stamp(fd)
        if node_id is not None:
            node = self._nodes[node_id]
            step.detail = f"{node.path} [{offset}, +{written})"
            op = PendingOp(
                step.index, "write", node.path, offset, data[:written], node_id
            )
            node.pending.append(op)
        return written

    def fsync(self, fd: int) -> None:  # type: ignore[override]
        """Fsync; a file's bytes or a directory's entries become durable."""
        step, _ = self._step("fsync", f"fd {fd}")
        node_id = self._fd_node(fd)
        try:
            os.fsync(fd)
        except OSError as error:
            self._outcome(step, error)
            raise
        if node_id is None:
            return
        node = self._nodes[node_id]
        step.detail = node.path
        if node.kind == "file":
            node.durable = _read_fd(fd)
            node.pending.clear()
        elif node.kind == "dir":
            node.undo.clear()
            self._settle_renames(node_id)

    def _settle_renames(self, dir_id: int) -> None:
        """A cross-directory rename is durable once either directory is."""
        for rename in list(self._renames):
            if dir_id not in (rename.src_dir, rename.dst_dir):
                continue
            self._nodes[rename.src_dir].undo.pop(rename.src_name, None)
            self._nodes[rename.dst_dir].undo.pop(rename.dst_name, None)
            self._renames.remove(rename)

    def ftruncate(self, fd: int, length: int) -> None:  # type: ignore[override]
        """Truncate, remembered until the file's next fsync."""
        step, _ = self._step("ftruncate", f"fd {fd} to {length}")
        node_id = self._fd_node(fd)
        try:
            os.ftruncate(fd, length)
        except OSError as error:
            self._outcome(step, error)
            raise
        self._stamp(fd)
        if node_id is not None:
            node = self._nodes[node_id]
            step.detail = f"{node.path} to {length}"
            node.pending.append(
                PendingOp(step.index, "truncate", node.path, length, node=node_id)
            )

    def fstat(self, fd: int) -> os.stat_result:  # type: ignore[override]
        """Stat a descriptor (not a step)."""
        self._check_alive()
        return os.fstat(fd)

    def fchmod(self, fd: int, mode: int) -> None:  # type: ignore[override]
        """Change the mode (a step; modes always survive a crash)."""
        step, _ = self._step("fchmod", f"fd {fd} {mode:o}")
        node_id = self._fd_node(fd)
        try:
            os.fchmod(fd, mode)
        except OSError as error:
            self._outcome(step, error)
            raise
        if node_id is not None:
            self._nodes[node_id].mode = stat.S_IMODE(mode)

    def lstat(  # type: ignore[override]
        self, path: str, *, dir_fd: int | None = None
    ) -> os.stat_result:
        """Stat without following links (not a step)."""
        self._check_alive()
        return os.stat(path, dir_fd=dir_fd, follow_symlinks=False)

    def mkdir(  # type: ignore[override]
        self, path: str, mode: int = 0o700, *, dir_fd: int | None = None
    ) -> None:
        """Create a directory; its entry needs an fsync of the parent."""
        full = self._abs(path, dir_fd)
        step, _ = self._step("mkdir", self._rel(full))
        self._touch(full, step.index)
        try:
            os.mkdir(path, mode, dir_fd=dir_fd)
        except OSError as error:
            self._outcome(step, error)
            raise
        if self._tracked(full):
            self._new_node(os.lstat(full), full)

    def link(  # type: ignore[override]
        self,
        src: str,
        dst: str,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        """Hard-link; the new entry needs an fsync of its directory."""
        full_src = self._abs(src, src_dir_fd)
        full_dst = self._abs(dst, dst_dir_fd)
        step, _ = self._step("link", f"{self._rel(full_src)} -> {self._rel(full_dst)}")
        if self._tracked(full_src):
            self._entry(full_src)
        self._touch(full_dst, step.index)
        try:
            os.link(
                src,
                dst,
                src_dir_fd=src_dir_fd,
                dst_dir_fd=dst_dir_fd,
                follow_symlinks=False,
            )
        except OSError as error:
            self._outcome(step, error)
            raise

    def rename(  # type: ignore[override]
        self,
        src: str,
        dst: str,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        """Rename; undone unless a directory involved is fsynced after it."""
        full_src = self._abs(src, src_dir_fd)
        full_dst = self._abs(dst, dst_dir_fd)
        step, _ = self._step(
            "rename", f"{self._rel(full_src)} -> {self._rel(full_dst)}"
        )
        self._touch(full_src, step.index)
        self._touch(full_dst, step.index)
        src_parent = os.path.dirname(full_src)
        dst_parent = os.path.dirname(full_dst)
        try:
            os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        except OSError as error:
            self._outcome(step, error)
            raise
        if (
            src_parent != dst_parent
            and self._tracked(full_src)
            and self._tracked(full_dst)
        ):
            src_dir = self._entry(src_parent)
            dst_dir = self._entry(dst_parent)
            if src_dir is not None and dst_dir is not None:
                self._renames.append(
                    _Rename(
                        step.index,
                        src_dir,
                        os.path.basename(full_src),
                        dst_dir,
                        os.path.basename(full_dst),
                    )
                )

    def unlink(self, path: str, *, dir_fd: int | None = None) -> None:  # type: ignore[override]
        """Remove an entry; it comes back unless its directory is fsynced."""
        full = self._abs(path, dir_fd)
        step, _ = self._step("unlink", self._rel(full))
        self._touch(full, step.index)
        try:
            os.unlink(path, dir_fd=dir_fd)
        except OSError as error:
            self._outcome(step, error)
            raise

    def rmdir(self, path: str, *, dir_fd: int | None = None) -> None:  # type: ignore[override]
        """Remove an empty directory; it comes back unless its parent is fsynced."""
        full = self._abs(path, dir_fd)
        step, _ = self._step("rmdir", self._rel(full))
        self._touch(full, step.index)
        try:
            os.rmdir(path, dir_fd=dir_fd)
        except OSError as error:
            self._outcome(step, error)
            raise

    def listdir(self, fd: int) -> list[str]:  # type: ignore[override]
        """List a directory (not a step)."""
        self._check_alive()
        return os.listdir(fd)

    def flock(self, fd: int, operation: int) -> None:  # type: ignore[override]
        """Lock (not a step; a crash drops every lock with the descriptors)."""
        self._check_alive()
        fcntl.flock(fd, operation)


def tree_of(
    root: str | os.PathLike[str], exclude: Iterable[str] = DEFAULT_EXCLUDE
) -> dict[str, bytes | str]:
    """Return {relative path: bytes, "dir" or "-> target"} under `root`."""
    top = os.fspath(root)
    patterns = tuple(exclude)
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in list(dirnames):
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                dirnames.remove(name)
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, top)
            out[rel] = f"-> {os.readlink(full)}" if os.path.islink(full) else "dir"
        for name in filenames:
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, top)
            out[rel] = (
                f"-> {os.readlink(full)}" if os.path.islink(full) else _read_path(full)
            )
    return out


__all__ = [
    "CHOICES",
    "COUNTED",
    "CrashFS",
    "Fault",
    "PendingOp",
    "RebuildReport",
    "SimulatedCrash",
    "Step",
    "tree_of",
]
