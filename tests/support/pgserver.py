"""A throwaway PostgreSQL server for the test session (S4.4 tests).

The server listens only on a unix socket in a fresh directory under /tmp, with
`fsync` and `synchronous_commit` off (nothing here must survive), unless
`start_postgres(settings=...)` says otherwise. The superuser `postgres` connects
with trust auth; every other role must give its password (md5/SCRAM), so tests can
exercise authentication failures. PostgreSQL refuses to run as root: as root,
initdb and pg_ctl run through `runuser` as a dedicated system user.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

PG_USER = "spillvault-pg"
SUPERUSER = "postgres"
DBNAME = "postgres"
START_TIMEOUT_SECONDS = 30
STOP_POLLS = 800  # x 0.05 s: how long a crashed server may take to exit
DEFAULT_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
}
_TMP_PARENT = "/tmp"
_HBA = (
    "# spillvault test server: unix socket only\n"
    f"local all {SUPERUSER} trust\n"
    "local all all md5\n"
)


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries (initdb, pg_ctl) are not installed."""


class PostgresStartError(RuntimeError):
    """The binaries exist but the server could not be set up or started."""


REQUIRE_FLAG = "SPILLVAULT_REQUIRE_POSTGRES"
"""Set by `.ci/run`: a missing server fails the PostgreSQL tests instead of skipping."""


def in_ci() -> bool:
    """Say whether a missing server is an error, never a skip (CI, or the flag set)."""
    return any(
        os.environ.get(name, "").strip().lower() not in {"", "0", "false", "no"}
        for name in ("CI", REQUIRE_FLAG)
    )


def find_bin_dir() -> str:
    """Return the directory holding initdb and pg_ctl (highest version first)."""

    def version(path: str) -> tuple[int, ...]:
        name = os.path.basename(os.path.dirname(path))
        return tuple(int(part) for part in re.findall(r"\d+", name))

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version)
    for bin_dir in reversed(candidates):
        if all(_executable(os.path.join(bin_dir, n)) for n in ("initdb", "pg_ctl")):
            return bin_dir
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl and os.path.dirname(initdb) == os.path.dirname(pg_ctl):
        return os.path.dirname(initdb)
    msg = (
        "PostgreSQL server binaries (initdb, pg_ctl) not found in "
        "/usr/lib/postgresql/*/bin or on PATH; install e.g. postgresql-15"
    )
    raise PostgresUnavailable(msg)


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def ensure_system_user(name: str = PG_USER) -> pwd.struct_passwd:
    """Return the dedicated OS user, creating it (system, no home, no shell)."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [
            useradd,
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    try:  # another process may have created it meanwhile: look again
        return pwd.getpwnam(name)
    except KeyError:
        msg = f"cannot create system user {name!r}: {result.stderr.strip()}"
        raise PostgresStartError(msg) from None


def _free_port() -> int:
    # Only names the socket file (no TCP listener); a free TCP port avoids
    # surprising anyone reading the process list.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    """A running throwaway server; `stop()` kills it and removes its files."""

    root: str
    bin_dir: str
    port: int
    run_as: str | None
    settings: Mapping[str, str] = field(default_factory=dict)
    stopped: bool = field(default=False, init=False)

    @property
    def data_dir(self) -> str:
        """The cluster's data directory (0700, owned by the server's user)."""
        return os.path.join(self.root, "data")

    @property
    def socket_dir(self) -> str:
        """The directory holding the server's unix socket."""
        return os.path.join(self.root, "sock")

    @property
    def log_file(self) -> str:
        """The server log written by pg_ctl."""
        return os.path.join(self.root, "postgres.log")

    @property
    def dsn(self) -> str:
        """A libpq URI that psycopg and spillvault both accept (host = socket dir)."""
        return self.dsn_for(SUPERUSER)

    def dsn_for(self, user: str, password: str | None = None) -> str:
        """A DSN for another role (and password) on this server."""
        auth = quote(user, safe="")
        if password is not None:
            auth += ":" + quote(password, safe="")
        host = quote(self.socket_dir, safe="/")
        return f"postgresql://{auth}@/{DBNAME}?host={host}&port={self.port}"

    def command(self, tool: str, *args: str) -> list[str]:
        """Build the argv of a server tool, run as the server's user."""
        argv = [os.path.join(self.bin_dir, tool), *args]
        if self.run_as is None:
            return argv
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        return [runuser, "-u", self.run_as, "--", *argv]

    def run(self, tool: str, *args: str, timeout: float) -> None:
        """Run a server tool; raise with its output (and the log) on failure."""
        argv = self.command(tool, *args)
        try:
            result = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout,
                cwd=self.root,
                env=_child_env(),
            )
        except subprocess.TimeoutExpired as error:
            msg = f"{tool} timed out after {timeout}s{self._log_tail()}"
            raise PostgresStartError(msg) from error
        if result.returncode != 0:
            msg = (
                f"{shlex.join(argv)} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}{self._log_tail()}"
            )
            raise PostgresStartError(msg)

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Start the server on its data directory (after a crash: recovery first)."""
        options = [
            "-c", "listen_addresses=",
            "-k", self.socket_dir,
            "-p", str(self.port),
        ]  # fmt: skip
        for name, value in self.settings.items():
            options += ["-c", f"{name}={value}"]
        self.run(
            "pg_ctl",
            "start",
            "-D",
            self.data_dir,
            "-l",
            self.log_file,
            "-o",
            shlex.join(options),
            "-w",
            "-t",
            str(int(timeout)),
            timeout=timeout + 10,
        )

    def crash(self, *, kill: Iterable[int] = ()) -> None:
        """Stop in immediate mode, as a crash, and SIGKILL `kill`; keep the data."""
        # A process frozen with SIGSTOP never handles immediate mode's SIGQUIT;
        # SIGKILL ends it without letting it run (and write) again.
        self.run(
            "pg_ctl", "stop", "-D", self.data_dir, "-m", "immediate", "-W", timeout=40
        )
        for pid in kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pid_file = os.path.join(self.data_dir, "postmaster.pid")
        for _ in range(STOP_POLLS):
            if not os.path.exists(pid_file):
                return
            time.sleep(0.05)
        msg = f"the server did not exit after an immediate stop{self._log_tail()}"
        raise PostgresStartError(msg)

    def stop(self) -> None:
        """Stop the server (immediate mode) and remove its directory; idempotent."""
        if self.stopped:
            return
        self.stopped = True
        atexit.unregister(self.stop)
        try:
            if os.path.exists(os.path.join(self.data_dir, "postmaster.pid")):
                self.run(
                    "pg_ctl",
                    "stop",
                    "-D",
                    self.data_dir,
                    "-m",
                    "immediate",
                    "-w",
                    timeout=40,
                )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            with open(self.log_file, encoding="utf-8", errors="replace") as log:
                return "\n--- server log ---\n" + log.read()[-4000:]
        except OSError:
            return ""


def _child_env() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "TZ"}}
    return {**keep, "LC_ALL": "C", "LANG": "C"}


def start_postgres(
    timeout: float = START_TIMEOUT_SECONDS,
    settings: Mapping[str, str] | None = None,
) -> PostgresServer:
    """Start a fresh server with `settings` over the defaults (raise without one)."""
    bin_dir = find_bin_dir()
    owner = ensure_system_user() if os.geteuid() == 0 else None
    parent = _TMP_PARENT if os.path.isdir(_TMP_PARENT) else tempfile.gettempdir()
    root = tempfile.mkdtemp(prefix="spillvault-pg-", dir=parent)
    server = PostgresServer(
        root=root,
        bin_dir=bin_dir,
        port=_free_port(),
        run_as=owner.pw_name if owner else None,
        settings={**DEFAULT_SETTINGS, **(settings or {})},
    )
    atexit.register(server.stop)
    try:
        os.chmod(root, 0o755)  # noqa: S103 - the server user must traverse it
        os.mkdir(server.socket_dir, 0o755)
        if owner is not None:
            for path in (root, server.socket_dir):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        server.run(
            "initdb",
            "-D",
            server.data_dir,
            "--auth=trust",
            "-U",
            SUPERUSER,
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            timeout=timeout,
        )
        _write_hba(server, owner)
        server.start(timeout)
    except BaseException:
        server.stop()
        raise
    return server


def _write_hba(server: PostgresServer, owner: pwd.struct_passwd | None) -> None:
    path = os.path.join(server.data_dir, "pg_hba.conf")
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "w", encoding="ascii") as hba:
        hba.write(_HBA)
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)


def wait_for_connection(dsn: str, timeout: float = 10.0) -> None:
    """Connect once with psycopg, retrying briefly (pg_ctl -w already waited)."""
    import psycopg  # noqa: PLC0415 - the postgres extra

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=5) as connection:
                connection.execute("SELECT 1")
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        else:
            return
