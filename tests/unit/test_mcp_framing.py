"""MCP's stdio framing: whole lines in, whole lines out, huge ones included."""

from __future__ import annotations

import io
import json
import threading

from hypothesis import given
from hypothesis import strategies as st

from spillvault.adapters.mcp.framing import LineWriter, encode, read_lines

_messages = st.dictionaries(
    st.text(max_size=5),
    st.one_of(st.text(), st.integers(), st.none(), st.lists(st.text(), max_size=3)),
    max_size=4,
)


@given(st.lists(_messages, max_size=8), st.sampled_from([b"\n", b"\r\n"]))
def test_encoded_messages_read_back_one_per_line(
    messages: list[dict[str, object]], ending: bytes
) -> None:
    """Any message encodes to one line; blank lines and CRLF endings are skipped."""
    wire = b"\n".join(encode(m).rstrip(b"\n") + ending for m in messages) + b"\n\n"
    lines = list(read_lines(io.BytesIO(wire)))
    assert [json.loads(line) for line in lines] == messages
    assert all(line.endswith(b"\n") for line in lines)


def test_a_line_of_many_megabytes_reads_whole() -> None:
    """A 20 MB message is one line, however the buffer chunks it."""
    big = encode({"text": "x\n" * 10_000_000})
    stream = io.BufferedReader(io.BytesIO(big + encode({"n": 1})), buffer_size=65536)
    lines = list(read_lines(stream))
    assert len(lines) == 2
    assert len(json.loads(lines[0])["text"]) == 20_000_000
    assert json.loads(lines[1]) == {"n": 1}


def test_a_last_line_without_newline_still_counts() -> None:
    """EOF ends the last message as a newline would."""
    lines = list(read_lines(io.BytesIO(b'{"a":1}\r\n{"b":2}')))
    assert lines == [b'{"a":1}\r\n', b'{"b":2}\n']


def test_lines_from_many_threads_never_interleave() -> None:
    """Writers share a stream; each line lands whole."""
    sink = io.BytesIO()
    writer = LineWriter(sink)
    line = b"y" * 100_000 + b"\n"

    def write() -> None:
        for _ in range(20):
            writer.write_line(line)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sink.getvalue() == line * 80


def test_a_closed_peer_makes_writes_report_false() -> None:
    """After the peer is gone, writes say so instead of raising."""

    class Gone(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, _data: object) -> int:
            raise BrokenPipeError

    writer = LineWriter(Gone())  # type: ignore[arg-type]
    assert writer.send({"a": 1}) is False
    assert writer.closed
    assert writer.send({"a": 2}) is False
