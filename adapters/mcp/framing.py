"""MCP's stdio framing: one JSON-RPC message per line, read in linear time.

The SDK's stdio client re-splits its whole buffer on every 64 KB chunk, so a
message of n bytes costs O(n²/64 KB): a 40 MB line took about 19 s of CPU.
`BufferedReader.readline` gathers the chunks of one line and joins them
once, so a line costs O(n) whatever its size.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator


def read_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Yield each non-empty line of `stream` without its line ending, until EOF."""
    while line := stream.readline():
        line = line.rstrip(b"\r\n")
        if line:
            yield line


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
        """Write `line` (ending in a newline); return False once the peer is gone."""
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


__all__ = ["LineWriter", "encode", "read_lines"]
