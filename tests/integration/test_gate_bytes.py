"""Bytes through the gate: binary described, text gated as text, terminal noise
cleaned from previews while artifacts keep every byte (S1.2, S1.4, S2.4).
"""

from __future__ import annotations

import gzip
import logging
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.session import ToolResultExternalizer, open_session
from spillvault.domain.terminal import clean_terminal

from support.faults import FullDisk
from support.intercept import InterceptingFS
from support.views import as_if_for, parse_view

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.services.externalizer import GateOutcome
    from spillvault.domain.values import ArtifactReference

BASH_LIMIT = 30_000  # chars
HEADER_START = "[tool result stored as "
PARTIAL_MARK = "partial: the stored output is incomplete"
PNG_HEAD = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x02\x00\x00\x00\x01\x80\x08\x06"
)
ELF_HEAD = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + b"\x02\x00\x3e\x00"


@pytest.fixture
def ext(session_dir: Path) -> Iterator[ToolResultExternalizer]:
    gate = ToolResultExternalizer(session_dir, event_store="memory")
    try:
        yield gate
    finally:
        gate.close()


def results(ext: ToolResultExternalizer) -> list[str]:
    return sorted(os.listdir(ext.tool_results_dir))


def stored_bytes(ext: ToolResultExternalizer, reference: ArtifactReference) -> bytes:
    return ext.read_artifact_bytes(reference.handle, 0, reference.size_bytes)


def streamed(
    ext: ToolResultExternalizer, data: bytes, *, interrupted: bool = False
) -> GateOutcome:
    stream = ext.open_stream("bash")
    for start in range(0, len(data), 4096):  # chunks split lines and sequences
        stream.write(data[start : start + 4096])
    return stream.close(interrupted=interrupted)


def view_of(outcome: GateOutcome) -> str:
    assert outcome.artifact is not None
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith(HEADER_START)
    assert outcome.artifact.handle in outcome.content  # what exists is shown
    return outcome.content


# binary output -------------------------------------------------------------------


def test_bytes_with_a_nul_are_stored_whatever_their_size_and_described(
    ext: ToolResultExternalizer,
) -> None:
    data = gzip.compress(b"build log line\n" * 2_000, mtime=0)  # small, with NULs
    assert b"\x00" in data
    assert len(data) < BASH_LIMIT
    outcome = ext.process(data, "bash", tool_use_id="toolu_bin")
    assert outcome.reason == "binary"
    view = parse_view(view_of(outcome))
    assert view.head == (
        f"[binary output: gzip data, {len(data)} bytes; first 16 bytes (hex): "
        f"{data[:16].hex(' ')}]"
    )
    assert "tool_use_id: toolu_bin" in view.header
    assert (view.tail, view.key_lines) == ("", [])
    assert view.omitted_units == len(data)  # nothing of it is in the view
    assert "\ufffd" not in outcome.content  # no decoded noise anywhere
    reference = outcome.artifact
    assert reference is not None
    assert ext.read_artifact_bytes(reference.handle, 0, reference.size_bytes) == data


@pytest.mark.parametrize(("tool", "arm"), [("read", "model"), ("web", "log")])
def test_binary_is_stored_for_an_exempt_tool_and_on_the_log_arm(
    ext: ToolResultExternalizer, tool: str, arm: str
) -> None:
    outcome = ext.process(ELF_HEAD, tool, arm=arm)  # type: ignore[arg-type]
    assert outcome.reason == "binary"
    assert "[binary output: ELF binary, 20 bytes;" in view_of(outcome)
    assert outcome.artifact is not None
    assert stored_bytes(ext, outcome.artifact) == ELF_HEAD


def test_a_png_is_described_alike_from_process_and_from_a_stream(
    ext: ToolResultExternalizer,
) -> None:
    data = PNG_HEAD + os.urandom(20_000)
    direct = ext.process(bytearray(data), "bash")
    stream = streamed(ext, data)
    assert (direct.reason, stream.reason) == ("binary", "binary")
    assert "PNG image" in parse_view(view_of(direct)).head
    assert direct.artifact is not None
    assert stream.artifact is not None
    assert view_of(stream) == as_if_for(
        view_of(direct), direct.artifact, stream.artifact
    )
    assert stored_bytes(ext, direct.artifact) == data
    assert stored_bytes(ext, stream.artifact) == data


def test_a_short_binary_stream_shows_its_handle(ext: ToolResultExternalizer) -> None:
    data = b"\x00\x01\x02 tiny"
    outcome = streamed(ext, data)
    assert outcome.reason == "binary"
    line = parse_view(view_of(outcome)).head
    assert line.startswith("[binary output: binary data, 8 bytes;")
    assert outcome.artifact is not None
    assert stored_bytes(ext, outcome.artifact) == data


def test_an_interrupted_binary_stream_is_described_as_partial(
    ext: ToolResultExternalizer,
) -> None:
    outcome = streamed(ext, PNG_HEAD + b"\x00" * 100, interrupted=True)
    assert outcome.reason == "interrupted"
    view = parse_view(view_of(outcome))
    assert PARTIAL_MARK in view.header
    assert "PNG image" in view.head


def test_a_binary_view_over_the_budget_drops_its_description(
    ext: ToolResultExternalizer,
) -> None:
    # Streams are stored before any rule: a tool_use_id this long leaves no
    # room for the description line, but the handle is still shown.
    stream = ext.open_stream("bash", tool_use_id="t" * (BASH_LIMIT - 300))
    stream.write(ELF_HEAD)
    outcome = stream.close()
    assert outcome.reason == "binary"
    assert parse_view(view_of(outcome)).head == ""


def test_binary_that_cannot_be_stored_is_described_without_a_handle(
    session_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = InterceptingFS()
    with open_session(session_dir, fs=fs, event_store="memory") as session:
        gate = ToolResultExternalizer(session_dir, session=session)
        with fs.around("write", FullDisk(0)), caplog.at_level(logging.WARNING):
            outcome = gate.process(PNG_HEAD, "bash")
        assert outcome.reason == "store_failed"
        assert outcome.artifact is None
        assert outcome.content == (
            f"[binary output: PNG image, {len(PNG_HEAD)} bytes; first 16 bytes "
            f"(hex): {PNG_HEAD[:16].hex(' ')}]"
        )
        assert results(gate) == []
        too_long = gate.process(PNG_HEAD, "bash", tool_use_id="t" * 40_000)
        assert too_long.reason == "notice_too_large"
        assert too_long.content == outcome.content
        assert results(gate) == []
        gate.close()


# bytes of text --------------------------------------------------------------------


def test_utf8_bytes_over_the_limit_preview_like_the_same_string(
    ext: ToolResultExternalizer,
) -> None:
    text = "".join(f"step {i:05d}: caf\u00e9 \U0001f600 ok\n" for i in range(4_000))
    assert len(text) > BASH_LIMIT
    as_text = ext.process(text, "bash")
    assert as_text.artifact is not None
    for content in (text.encode(), bytearray(text.encode()), memoryview(text.encode())):
        as_bytes = ext.process(content, "bash")
        assert as_bytes.reason == "spilled"
        assert as_bytes.artifact is not None
        assert stored_bytes(ext, as_bytes.artifact) == text.encode()
        assert view_of(as_bytes) == as_if_for(
            view_of(as_text), as_text.artifact, as_bytes.artifact
        )


def test_text_bytes_that_stay_come_back_as_their_text(
    ext: ToolResultExternalizer,
) -> None:
    small = ext.process(b"3 passed\n\xff\n", "bash")
    assert (small.reason, small.content, small.artifact) == (
        "under_limit",
        "3 passed\n\ufffd\n",
        None,
    )
    big = b"line\n" * 20_000
    exempt = ext.process(big, "read")
    assert (exempt.reason, exempt.content) == ("exempt_tool", big.decode())
    assert results(ext) == []


def test_text_bytes_with_a_few_invalid_bytes_are_stored_verbatim(
    ext: ToolResultExternalizer,
) -> None:
    data = "caf\u00e9 row\n".encode("latin-1") * 5_000  # one invalid byte a line
    outcome = ext.process(data, "bash")
    assert outcome.reason == "spilled"
    assert "caf\ufffd row" in view_of(outcome)  # shown as text
    assert outcome.artifact is not None
    assert stored_bytes(ext, outcome.artifact) == data  # no decode/encode trip


# terminal noise ---------------------------------------------------------------------

GREEN, RED, BOLD, RESET = "\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[0m"
FAILED_AT = 1717
ERROR_AT = 2_300


def colored_pytest_log(tests: int = 3_000) -> str:
    """A `pytest --color=yes -v` log as a terminal gets it, over 240 KB."""
    lines = [
        f"{BOLD}{'=' * 29} test session starts {'=' * 30}{RESET}",
        "platform linux -- Python 3.11.7, pytest-9.2.0, pluggy-1.7.0",
        f"{BOLD}collecting ... {RESET}\r{BOLD}collected {tests} items{RESET}",
        "",
    ]
    for n in range(1, tests + 1):
        done = f"[{n * 100 // tests:3d}%]"
        name = f"tests/unit/test_mod_{n % 37:02d}.py::test_case_{n:05d}"
        if n == FAILED_AT:
            lines.append(f"{name} {RED}FAILED{RESET}{RED}{done:>20}{RESET}")
        elif n == ERROR_AT:
            lines.append(f"{RED}E       AssertionError: assert 3 == 4{RESET}")
        elif n % 500 == 0:  # a progress bar redrawn in place, then CRLF
            bar = "\r".join(f"fixtures {p:3d}%" for p in range(0, 101, 10))
            lines.append(f"{bar}\r")
        elif n % 250 == 0:  # a hyperlinked path (OSC 8, ST-terminated)
            link = "\x1b]8;;file:///repo/tests/unit/test_mod.py\x1b\\"
            lines.append(f"{link}tests/unit/test_mod.py\x1b]8;;\x1b\\:{n}: in test")
        else:
            lines.append(f"{name} {GREEN}PASSED{RESET}{GREEN}{done:>20}{RESET}")
    lines.append(
        f"{RED}{BOLD}{'=' * 20} 1 failed, {tests - 1} passed {'=' * 20}{RESET}"
    )
    return "\n".join(lines) + "\n"


def check_clean_with_the_artifacts_line_numbers(
    ext: ToolResultExternalizer, outcome: GateOutcome, data: bytes
) -> list[int]:
    """Check a colored output's preview line by line; return its key lines' numbers."""
    assert outcome.reason == "spilled"
    content = view_of(outcome)
    assert "\x1b" not in content
    assert "\r" not in content
    assert outcome.artifact is not None
    stored = stored_bytes(ext, outcome.artifact)
    assert stored == data  # the artifact keeps every escape and CR
    raw_lines = stored.decode().split("\n")
    view = parse_view(content)
    assert view.span is not None
    first, last = view.span
    head_lines = view.head.split("\n")
    if head_lines[-1] == "":
        head_lines.pop()  # the head ended with its last line's newline
    assert len(head_lines) == first - 1
    assert head_lines == [clean_terminal(line) for line in raw_lines[: first - 1]]
    assert view.tail.split("\n") == [clean_terminal(line) for line in raw_lines[last:]]
    for number, shown in view.key_lines:
        assert first <= number <= last
        assert clean_terminal(raw_lines[number - 1]).startswith(shown)
    return [number for number, _ in view.key_lines]


def test_a_colored_pytest_log_is_previewed_clean_with_the_artifacts_line_numbers(
    ext: ToolResultExternalizer,
) -> None:
    text = colored_pytest_log()
    data = text.encode()
    assert len(data) > 2 * 4 * BASH_LIMIT  # a stream previews it from windows
    failed, error = FAILED_AT + 4, ERROR_AT + 4  # four lines of header first
    for outcome in (ext.process(text, "bash"), ext.process(data, "bash")):
        keys = check_clean_with_the_artifacts_line_numbers(ext, outcome, data)
        assert failed in keys  # judged on the cleaned line: "FAILED"
        assert error in keys
    from_stream = streamed(ext, data)
    keys = check_clean_with_the_artifacts_line_numbers(ext, from_stream, data)
    # The stream's scanner matches raw lines: "\x1b[31mFAILED" is no word.
    assert error in keys


REAL_TESTS = """
import pytest

@pytest.mark.parametrize("n", range(400))
def test_case(n):
    if n == 200:
        print("fetch 10%\\rfetch 60%\\rfetch 100%")
        assert n == 3
"""


def test_a_real_pytest_color_log_is_previewed_clean(
    ext: ToolResultExternalizer, tmp_path: Path
) -> None:
    (tmp_path / "test_real.py").write_text(REAL_TESTS)
    pytest_bin = os.path.join(os.path.dirname(sys.executable), "pytest")
    argv = [pytest_bin, "--color=yes", "-v", "-p", "no:cacheprovider", "test_real.py"]
    data = subprocess.run(argv, cwd=tmp_path, capture_output=True, check=False).stdout
    assert b"\x1b[" in data  # real SGR colors
    assert b"fetch 10%\rfetch 60%\rfetch 100%" in data  # captured output, redrawn
    assert len(data) > BASH_LIMIT
    for outcome in (ext.process(data, "bash"), streamed(ext, data)):
        check_clean_with_the_artifacts_line_numbers(ext, outcome, data)
    assert "\nfetch 100%\n" in view_of(outcome)  # the redrawn line's last state


def test_cleaning_can_leave_room_for_the_whole_output(
    ext: ToolResultExternalizer,
) -> None:
    # Over the limit as written, far under it as shown: every line is shown.
    text = "".join(
        f"{GREEN}{'.' * 20}{RESET}{RED}{'F' * 20}{RESET}\r\n" for _ in range(600)
    )
    assert len(text) > BASH_LIMIT
    outcome = ext.process(text, "bash")
    assert outcome.reason == "spilled"
    view = parse_view(view_of(outcome))
    # The newline ending the head's last line may be the one before the notice;
    # then the notice counts that one character, and no line, as omitted.
    cleaned = clean_terminal(text)
    gap = len(cleaned) - len(view.head) - len(view.tail)
    assert cleaned == view.head + "\n" * gap + view.tail
    assert gap in {0, 1}
    assert (view.omitted_lines, view.omitted_units) == (0, gap)
    assert outcome.artifact is not None
    assert stored_bytes(ext, outcome.artifact) == text.encode()
