"""Separate network namespaces for test "hosts", linked to the servers by sockets.

A host process started through `isolated_argv` runs in a network namespace
of its own (`unshare --net`): its own loopback, no route to the test's
127.0.0.1, where SeaweedFS and PostgreSQL listen. Its only way out is the
links it is given. A link is a TCP listener on the host's own 127.0.0.1, on
the port the server has in the test's namespace, forwarding every
connection to a Unix socket: the filesystem is shared, the network is not.
So the host's environment names the same `127.0.0.1:port` endpoints as
everyone else's, and every byte it sends crosses a link the test set up.

Two halves: `TcpToUnix` runs inside the host (`start_links_from_environment`
reads them from `LINKS_ENV`); `UnixToTcp` runs in the test process, bridging
a Unix socket to a server's TCP port. PostgreSQL needs no test half: the
host's link goes straight to its Unix socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

LINKS_ENV = "SPILLVAULT_TEST_NETNS_LINKS"
BLOCK = 1 << 16
BACKLOG = 64


def can_isolate() -> bool:
    """Tell whether this machine lets us make a network namespace (root, or userns)."""
    try:
        done = subprocess.run(
            ["unshare", "--net", "--", "true"],
            capture_output=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def isolated_argv(argv: Sequence[str]) -> list[str]:
    """Return `argv` run in a new network namespace with its loopback up."""
    return [
        "unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"',
        "isolated-host", *argv,
    ]  # fmt: skip


def network_namespace() -> str:
    """Return this process's network namespace, e.g. `net:[4026532213]`."""
    return os.readlink("/proc/self/ns/net")


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy `source` to `sink` until end of stream, then pass the end on."""
    try:
        while block := source.recv(BLOCK):
            sink.sendall(block)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _splice(near: socket.socket, far: socket.socket) -> None:
    """Copy both ways between two connected sockets; close both when done."""
    back = threading.Thread(target=_pump, args=(far, near), daemon=True)
    back.start()
    _pump(near, far)
    back.join()
    near.close()
    far.close()


class _Forwarder:
    """Accept on `listener`; splice each connection to a fresh `connect()`."""

    def __init__(
        self, listener: socket.socket, connect: Callable[[], socket.socket]
    ) -> None:
        self._listener = listener
        self._connect = connect
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return  # closed: the link is cut
            try:
                far = self._connect()
            except OSError:
                near.close()  # the far end refuses: so does the link
                continue
            threading.Thread(target=_splice, args=(near, far), daemon=True).start()

    def close(self) -> None:
        """Stop accepting (connections already spliced run to their end)."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)


class UnixToTcp(_Forwarder):
    """In the test's namespace: a Unix socket at `path` leading to 127.0.0.1:`port`."""

    def __init__(self, path: str, port: int) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(BACKLOG)
        super().__init__(listener, lambda: _tcp_connection(port))


class TcpToUnix(_Forwarder):
    """In a host's namespace: 127.0.0.1:`port` leading to the Unix socket `path`."""

    def __init__(self, port: int, path: str) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(BACKLOG)
        super().__init__(listener, lambda: _unix_connection(path))


def _tcp_connection(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.settimeout(None)  # spliced sockets block; only the connect is bounded
    return connection


def _unix_connection(path: str) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError:
        connection.close()
        raise
    return connection


@dataclass(frozen=True)
class Link:
    """One way out of a host: its 127.0.0.1:`port` reaches the Unix socket `path`."""

    port: int
    path: str


def links_environment(links: Sequence[Link]) -> dict[str, str]:
    """The variable that tells a host which links to open."""
    return {LINKS_ENV: json.dumps([[link.port, link.path] for link in links])}


def start_links_from_environment() -> list[TcpToUnix]:
    """Open the links `LINKS_ENV` names (none if it is unset)."""
    named = json.loads(os.environ.get(LINKS_ENV, "[]"))
    return [TcpToUnix(int(port), str(path)) for port, path in named]


__all__ = [
    "LINKS_ENV",
    "Link",
    "TcpToUnix",
    "UnixToTcp",
    "can_isolate",
    "isolated_argv",
    "links_environment",
    "network_namespace",
    "start_links_from_environment",
]
