"""MCP's stdio framing: one JSON-RPC message per line, read in linear time.

The SDK's stdio client re-splits its whole buffer on every 64 KB chunk, so a
message of n bytes costs O(n²/64 KB): a 40 MB line took about 19 s of CPU.
`BufferedReader.readline` gathers the chunks of one line and joins them
once, so a line costs O(n) whatever its size. A line is returned as read,
its ending included (JSON allows the trailing whitespace), and the reader is
a function, not a generator: a suspended generator would keep the last huge
line alive until the next one came.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import IO, TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Iterator


def next_line(stream: IO[bytes]) -> bytes | None:
    """Return the next non-blank line of `stream`, its ending included; None at EOF."""
    while line := stream.readline():
        if line not in _BLANK:
            return line if line.endswith(b"\n") else line + b"\n"
    return None


def read_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Yield each non-blank line of `stream`, its ending included, until EOF."""
    while (line := next_line(stream)) is not None:
        yield line


_BLANK: Final = frozenset({b"\n", b"\r\n"})


def encode(message: dict[str, Any]) -> bytes:
    """Return one message as a line: compact JSON, UTF-8, no raw newline inside."""
    return (
        json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    )


class LineWriter:
    """Writes whole lines to one stream from many threads, flushing each."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.closed = False

    def write_line(self, line: bytes) -> bool:
        """Write `line`, which ends in a newline; return False once the peer is gone."""
        with self._lock:
            if self.closed:
                return False
            try:
                self._stream.write(line)
                self._stream.flush()
            except (BrokenPipeError, ConnectionResetError, ValueError, OSError):
                self.closed = True
                return False
            return True

    def send(self, message: dict[str, Any]) -> bool:
        """Write one message; return False once the peer is gone."""
        return self.write_line(encode(message))

    def close(self) -> None:
        """Close the stream; later writes are dropped."""
        with self._lock:
            self.closed = True
            with contextlib.suppress(OSError):
                self._stream.close()


__all__ = ["LineWriter", "encode", "next_line", "read_lines"]
