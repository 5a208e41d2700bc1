"""The gate keeps what a command did with its output and shows it (issue 15 §2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spillvault.adapters.session import ToolResultExternalizer
from spillvault.domain.command import CommandFacts
from spillvault.domain.enums import SizeUnit
from spillvault.domain.notice import worst_fixed_size
from spillvault.domain.policy import SpillPolicy, ToolLimit

if TYPE_CHECKING:
    from pathlib import Path

FACTS = CommandFacts(("make", "test"), 2, 31_250)
LINE = "[command: make test; exit: 2; duration: 31.2s]\n"
OUTPUT = "".join(f"line {n} of the build\n" for n in range(5_000))


def third_line(view: str) -> str:
    """Return the header's third line (with its newline)."""
    return view.split("\n", 3)[2] + "\n"


def test_a_spilled_result_keeps_its_command_and_shows_it(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s", event_store="memory")
    outcome = ext.process(OUTPUT, "bash", command=FACTS)
    assert outcome.reason == "spilled"
    assert isinstance(outcome.content, str)
    assert third_line(outcome.content) == LINE
    [artifact] = ext.artifacts()
    assert artifact.command_facts == FACTS
    plain = ext.process(OUTPUT, "bash")
    assert isinstance(plain.content, str)
    assert "[command: " not in plain.content


def test_binary_bytes_and_streams_show_their_command_too(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s", event_store="memory")
    binary = ext.process(b"\x00\x01\x02" * 100, "bash", command=FACTS)
    assert binary.reason == "binary"
    assert isinstance(binary.content, str)
    assert LINE in binary.content
    stream = ext.open_stream("bash")
    stream.write(OUTPUT.encode())
    killed = CommandFacts(("make", "test"), 130, 900, signal="SIGINT")
    streamed = stream.close(interrupted=True, command=killed)
    assert streamed.reason == "interrupted"
    assert isinstance(streamed.content, str)
    assert third_line(streamed.content) == (
        "[command: make test; exit: 130 (SIGINT); duration: 0.9s]\n"
    )
    assert [a.command_facts for a in ext.artifacts()] == [FACTS, killed]


def test_a_budget_too_small_for_the_command_line_keeps_the_output(
    tmp_path: Path,
) -> None:
    # The smallest valid budget fits any session's header, not a command line.
    unit = SizeUnit.CHARS
    smallest = worst_fixed_size(SpillPolicy(), "t", unit, is_error=True)
    policy = SpillPolicy(tool_limits={"t": ToolLimit(smallest, unit)})
    ext = ToolResultExternalizer(tmp_path / "s", policy=policy, event_store="memory")
    needed = worst_fixed_size(
        ext.policy, "t", unit, session_id=ext.session.session_id, with_command=True
    )
    assert needed > smallest
    assert ext.process(OUTPUT, "t", command=FACTS).reason == "notice_too_large"
    assert ext.process(OUTPUT, "t").reason == "spilled"
