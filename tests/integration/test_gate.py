"""The spill gate end to end (S1.1-S1.6, S2.4): `ToolResultExternalizer.process`,
its streams, and the seed calls around it, on real sessions.

The parts (policy, preview, store, reader, recovery) have their own suites; these
tests drive only the public gate and check what a harness and a model would see.
"""

from __future__ import annotations

import copy
import errno
import functools
import hashlib
import logging
import os
import re
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from spillvault.adapters.session import ToolResultExternalizer, open_session
from spillvault.domain.binary import is_binary
from spillvault.domain.enums import SizeUnit
from spillvault.domain.errors import SpillPolicyError
from spillvault.domain.policy import SpillPolicy
from spillvault.domain.terminal import clean_terminal

from support.child import json_from_child
from support.faults import FullDisk, mounted_tmpfs
from support.intercept import InterceptingFS
from support.views import as_if_for, parse_view

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.services.externalizer import GateOutcome
    from spillvault.adapters.session import Session
    from spillvault.domain.values import ArtifactReference

BASH_LIMIT = 30_000  # chars
DEFAULT_LIMIT = 51_200  # bytes
HEADER_START = "[tool result stored as "
PARTIAL_MARK = "partial: the stored output is incomplete"


# helpers ---------------------------------------------------------------------


def results(ext: ToolResultExternalizer) -> list[str]:
    return sorted(os.listdir(ext.tool_results_dir))


def artifact_topics(session: Session) -> list[str]:
    return [
        note.topic
        for note in session.store.notifications()
        if note.topic.startswith("spillvault:Artifact.")
    ]


def filename_of(reference: ArtifactReference) -> str:
    return os.path.basename(reference.path)


def stored_bytes(ext: ToolResultExternalizer, reference: ArtifactReference) -> bytes:
    return ext.read_artifact_bytes(reference, 0, reference.size_bytes)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING]


def assert_spilled(
    ext: ToolResultExternalizer, outcome: GateOutcome, text: str, tool: str
) -> str:
    """Check a spilled outcome: bounded preview, exact bytes behind the handle."""
    assert outcome.reason == "spilled"
    assert outcome.artifact is not None
    replacement = outcome.content
    assert isinstance(replacement, str)
    assert replacement.startswith(HEADER_START)
    assert outcome.artifact.handle in replacement
    limit = ext.policy.limit_for(tool)
    assert ext.policy.measure(replacement, limit.unit) <= limit.budget
    assert ext.policy.measure(replacement, limit.unit) < ext.policy.measure(
        text, limit.unit
    )
    assert stored_bytes(ext, outcome.artifact) == text.encode("utf-8")
    return replacement


def assert_untouched(
    ext: ToolResultExternalizer, outcome: GateOutcome, content: Any, reason: str
) -> None:
    """Check an untouched outcome: the very same object, nothing stored."""
    assert outcome.reason == reason
    assert outcome.content is content
    assert outcome.artifact is None
    assert results(ext) == []
    assert artifact_topics(ext.session) == []


@pytest.fixture
def ext(session_dir: Path) -> Iterator[ToolResultExternalizer]:
    gate = ToolResultExternalizer(session_dir, event_store="memory")
    try:
        yield gate
    finally:
        gate.close()


def big_log(lines: int = 4000) -> list[str]:
    return [f"step {i:05d}: ok" for i in range(1, lines + 1)]


# S1.2 rule 1: non_text ---------------------------------------------------------


def test_a_non_text_block_leaves_even_a_huge_result_untouched(
    ext: ToolResultExternalizer,
) -> None:
    image = {"type": "image", "source": {"type": "base64", "data": "iVBORw0K"}}
    content = [{"type": "text", "text": "x" * 200_000}, image]
    before = copy.deepcopy(content)
    for arm in ("model", "log"):
        outcome = ext.process(content, "bash", arm=arm)
        assert_untouched(ext, outcome, content, "non_text")
    # An image alone, and an image first, are the same case.
    assert ext.process([image], "read").reason == "non_text"
    assert ext.process([image, *content], "web").reason == "non_text"
    assert content == before


# S1.2 rule 2: exempt_tool ------------------------------------------------------


def test_a_read_tool_is_exempt_on_the_model_arm_only(
    ext: ToolResultExternalizer,
) -> None:
    text = "\n".join(big_log(8000))  # ~130 KB: far over the 50 KiB default
    for tool in ("read", "read_file", "read_artifact", "grep_artifact"):
        assert_untouched(ext, ext.process(text, tool), text, "exempt_tool")
    # The log arm has no read -> spill -> read loop: no exemption.
    outcome = ext.process(text, "read", arm="log")
    assert_spilled(ext, outcome, text, "read")
    assert outcome.artifact is not None
    assert outcome.artifact.source_tool == "read"


def test_exempt_names_are_exact_and_case_sensitive(
    ext: ToolResultExternalizer,
) -> None:
    text = "y" * (DEFAULT_LIMIT + 1)
    for tool in ("Read", "read ", "READ_FILE", "mcp__fs__read_file"):
        assert ext.process(text, tool).reason == "spilled"


def test_configured_exempt_tools_replace_the_defaults(session_dir: Path) -> None:
    policy = SpillPolicy.from_mapping({"exempt_tools": ["view"]})
    gate = ToolResultExternalizer(session_dir, policy=policy, event_store="memory")
    try:
        text = "z" * (DEFAULT_LIMIT + 1)
        assert gate.process(text, "view").reason == "exempt_tool"
        assert gate.process(text, "read").reason == "spilled"
    finally:
        gate.close()


def test_an_unknown_arm_is_refused(ext: ToolResultExternalizer) -> None:
    with pytest.raises(ValueError, match="arm"):
        ext.process("x", "bash", arm="transcript")  # type: ignore[arg-type]
    assert results(ext) == []


# S1.2 rule 3 and S1.3: under_limit, with the real defaults -----------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a" * BASH_LIMIT, "under_limit"),
        ("a" * (BASH_LIMIT + 1), "spilled"),
        # chars are code points: 30,000 emoji are 120,000 bytes and still fit
        ("\U0001f600" * BASH_LIMIT, "under_limit"),
        ("\U0001f600" * (BASH_LIMIT + 1), "spilled"),
        ("e\u0301" * (BASH_LIMIT // 2), "under_limit"),
        ("e\u0301" * (BASH_LIMIT // 2) + "!", "spilled"),
        ("", "under_limit"),
    ],
    ids=[
        "ascii-30000",
        "ascii-30001",
        "emoji-30000",
        "emoji-30001",
        "combining-30000",
        "combining-30001",
        "empty",
    ],
)
def test_bash_limit_is_30000_code_points(
    ext: ToolResultExternalizer, text: str, reason: str
) -> None:
    outcome = ext.process(text, "bash")
    if reason == "under_limit":
        assert_untouched(ext, outcome, text, "under_limit")
    else:
        assert_spilled(ext, outcome, text, "bash")


@pytest.mark.parametrize(
    "unit",
    ["a\u5b57\U0001f600\u00e9", "\U0001f600", "\u5b57\u5b57\u5b57\u5b57a\u00e9"],
    ids=["mixed-10-bytes", "emoji-4-bytes", "cjk-mixed-15-bytes"],
)
def test_other_tools_limit_is_51200_utf8_bytes(
    ext: ToolResultExternalizer, unit: str
) -> None:
    size = len(unit.encode())
    exact = unit * (DEFAULT_LIMIT // size)
    exact += "a" * (DEFAULT_LIMIT - len(exact.encode()))
    assert len(exact.encode()) == DEFAULT_LIMIT
    assert len(exact) < DEFAULT_LIMIT  # a chars limit would get this wrong
    assert_untouched(ext, ext.process(exact, "web_fetch"), exact, "under_limit")
    over = exact + "b"
    assert_spilled(ext, ext.process(over, "web_fetch"), over, "web_fetch")
    # One more multi-byte character is over too, however few characters it is.
    over_by_char = "a" * (DEFAULT_LIMIT - 3) + "\U0001f600"
    assert len(over_by_char.encode()) == DEFAULT_LIMIT + 1
    outcome = ext.process(over_by_char, "web_fetch")
    assert_spilled(ext, outcome, over_by_char, "web_fetch")


def test_empty_results_are_under_the_limit(ext: ToolResultExternalizer) -> None:
    for content in ("", [], [{"type": "text", "text": ""}]):
        assert_untouched(ext, ext.process(content, "bash"), content, "under_limit")
        assert_untouched(
            ext, ext.process(content, "x", arm="log"), content, "under_limit"
        )


def test_should_externalize_agrees_with_the_gate(ext: ToolResultExternalizer) -> None:
    assert not ext.should_externalize("a" * BASH_LIMIT, "bash")
    assert ext.should_externalize("a" * (BASH_LIMIT + 1), "bash")
    assert not ext.should_externalize("\u00e9" * (DEFAULT_LIMIT // 2), "grep")
    assert ext.should_externalize("\u00e9" * (DEFAULT_LIMIT // 2) + ".", "grep")
    assert results(ext) == []


# shapes: string in, string out; blocks ------------------------------------------


def test_a_string_in_gives_a_string_out(ext: ToolResultExternalizer) -> None:
    small, big = "ok\n", "line\n" * 12_000
    assert ext.process(small, "bash").content is small
    outcome = ext.process(big, "web")
    assert type(outcome.content) is str
    assert_spilled(ext, outcome, big, "web")


def test_text_blocks_are_joined_with_newlines_and_spill_as_one_block(
    ext: ToolResultExternalizer,
) -> None:
    first = {
        "type": "text",
        "text": "a" * 20_000,
        "cache_control": {"type": "ephemeral"},
        "citations": None,
    }
    content = [first, {"type": "text", "text": "b" * 20_000, "extra": 1}]
    before = copy.deepcopy(content)
    outcome = ext.process(content, "bash", tool_use_id="toolu_blocks")
    joined = "a" * 20_000 + "\n" + "b" * 20_000
    assert content == before  # never mutated
    assert outcome.reason == "spilled"
    assert outcome.artifact is not None
    assert stored_bytes(ext, outcome.artifact) == joined.encode()
    assert isinstance(outcome.content, list)
    [block] = outcome.content
    assert block is not first
    assert block["type"] == "text"
    assert block["cache_control"] == {"type": "ephemeral"}
    assert "citations" in block
    assert "extra" not in block  # only the first block's keys are kept
    assert len(block["text"]) <= BASH_LIMIT
    assert block["text"].startswith(HEADER_START)
    # The same joined text as a string gives the same preview text.
    assert ext.make_pointer(joined, outcome.artifact) == block["text"]


def test_the_joining_newline_counts_toward_the_limit(
    ext: ToolResultExternalizer,
) -> None:
    half = BASH_LIMIT // 2
    fits = [
        {"type": "text", "text": "a" * half},
        {"type": "text", "text": "b" * (half - 1)},
    ]
    assert_untouched(ext, ext.process(fits, "bash"), fits, "under_limit")
    over = [{"type": "text", "text": "a" * half}, {"type": "text", "text": "b" * half}]
    outcome = ext.process(over, "bash")
    assert outcome.reason == "spilled"
    assert outcome.artifact is not None
    assert outcome.artifact.size_bytes == BASH_LIMIT + 1


# tool_use_id and is_error --------------------------------------------------------


def test_tool_use_id_and_is_error_are_recorded_and_shown(
    ext: ToolResultExternalizer,
) -> None:
    text = "Traceback (most recent call last):\n" + "frame\n" * 8_000
    outcome = ext.process(text, "bash", tool_use_id="toolu_01ABC", is_error=True)
    replacement = assert_spilled(ext, outcome, text, "bash")
    assert outcome.artifact is not None
    recorded = ext.session.store.get_artifact(filename_of(outcome.artifact))
    assert recorded is not None
    assert recorded.tool_use_id == "toolu_01ABC"
    assert recorded.is_error is True
    header = replacement.split("\n", 1)[0]
    assert "tool_use_id: toolu_01ABC" in header
    assert "is_error: true" in header
    plain = ext.process(text, "bash")
    assert plain.artifact is not None
    recorded = ext.session.store.get_artifact(filename_of(plain.artifact))
    assert recorded is not None
    assert (recorded.tool_use_id, recorded.is_error) == (None, False)
    assert isinstance(plain.content, str)
    plain_header = plain.content.split("\n", 1)[0]
    assert "tool_use_id:" not in plain_header
    assert "is_error:" not in plain_header


@pytest.mark.parametrize("size", [0, 100, BASH_LIMIT, BASH_LIMIT + 1, 90_000])
def test_tool_use_id_and_is_error_do_not_change_the_decision(
    ext: ToolResultExternalizer, size: int
) -> None:
    text = "r" * size
    plain = ext.process(text, "bash").reason
    for is_error in (False, True):
        flagged = ext.process(text, "bash", tool_use_id="toolu_9", is_error=is_error)
        assert flagged.reason == plain
    exempt = ext.process(text, "read", tool_use_id="toolu_9", is_error=True)
    assert exempt.reason == "exempt_tool"


# S1.2 rule 4: notice_too_large -----------------------------------------------------


@functools.cache
def smallest_budget(unit: str, tool: str = "t", **top: int) -> int:
    """The smallest preview budget a policy with these settings accepts (S1.3)."""

    def valid(budget: int) -> bool:
        table = {"limit": 10**6, "unit": unit, "preview_budget": budget}
        try:
            SpillPolicy.from_mapping({**top, "tools": {tool: table}})
        except SpillPolicyError:
            return False
        return True

    low, high = 1, 10**6
    assert valid(high)
    while high - low > 1:
        middle = (low + high) // 2
        if valid(middle):
            high = middle
        else:
            low = middle
    return high


def deep_session_dir(base: Path, path_chars: int) -> Path:
    """A session dir whose absolute path is about `path_chars` long."""
    path = base / "workspaces"
    while len(str(path)) < path_chars - 80:
        path = path / ("project-" + "x" * 60)
    path = path / ("d" * max(1, path_chars - len(str(path)) - 12))
    return path / "session-001"


def test_a_budget_sized_for_shorter_handles_than_the_backend_issues_refuses(
    tmp_path: Path,
) -> None:
    # A tight preview budget, valid for handles of up to 8 bytes; this session's
    # handles (<session-id>/<number>, numbers up to 12 digits) are longer.
    top = {"max_handle_length": 8, "max_hint_length": 40}
    budget = smallest_budget("chars", "bash", **top)
    policy = SpillPolicy.from_mapping(
        {
            **top,
            "tools": {
                "bash": {"limit": 20_000, "unit": "chars", "preview_budget": budget}
            },
        }
    )
    gate = ToolResultExternalizer(
        tmp_path / "a-session", policy=policy, event_store="memory"
    )
    try:
        assert len(gate.store.longest_handle()) > 8
        text = "output line\n" * 5_000
        outcome = gate.process(text, "bash", tool_use_id="toolu_1")
        assert_untouched(gate, outcome, text, "notice_too_large")
        # The same call under the limit never gets as far as rule 4.
        assert gate.process("short", "bash").reason == "under_limit"
    finally:
        gate.close()


def test_the_default_policy_spills_in_a_deep_session_directory(
    tmp_path: Path,
) -> None:
    # BUG (reported): rule 4 compares the handle and the hint with the
    # *declared* maxima instead of asking whether the real header and notice fit
    # the budget. The local hint quotes the handle twice, so any session path
    # over ~185 characters makes the default 512-byte max_hint_length overflow
    # and silently disables spilling — although ~800 chars of header and notice
    # fit the 30,000-char bash budget many times over.
    session_dir = deep_session_dir(tmp_path, 240)
    session_dir.parent.mkdir(parents=True)
    gate = ToolResultExternalizer(session_dir, event_store="memory")
    try:
        text = "x\n" * 20_000
        outcome = gate.process(text, "bash")
        assert outcome.reason == "spilled", outcome.reason
        assert_spilled(gate, outcome, text, "bash")
    finally:
        gate.close()


# S1.2 rule 5: store_failed -----------------------------------------------------------


def test_a_lone_surrogate_fails_to_store_and_keeps_the_original(
    ext: ToolResultExternalizer, caplog: pytest.LogCaptureFixture
) -> None:
    text = "x" * BASH_LIMIT + "\ud83d tail"
    blocks = [{"type": "text", "text": "\udc00" + "y" * DEFAULT_LIMIT}]
    with caplog.at_level(logging.WARNING):
        outcome = ext.process(text, "bash", tool_use_id="toolu_s")
    assert_untouched(ext, outcome, text, "store_failed")
    [record] = warnings_of(caplog)
    assert record.name == "spillvault"
    assert "bash" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        outcome = ext.process(blocks, "web", arm="log")
    assert_untouched(ext, outcome, blocks, "store_failed")
    assert len(warnings_of(caplog)) == 1
    # Nothing was consumed: the next spill still works.
    good = "ok\n" * 20_000
    assert_spilled(ext, ext.process(good, "bash"), good, "bash")


def test_a_full_disk_through_the_seam_fails_to_store_and_leaves_nothing(
    session_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = InterceptingFS()
    with open_session(session_dir, fs=fs) as session:  # the default SQLite store
        gate = ToolResultExternalizer(session_dir, session=session)
        text = "build output\n" * 10_000
        for allowed in (0, 70_000):  # at once, and after a short write mid-file
            disk = FullDisk(allowed)
            with fs.around("write", disk):
                caplog.clear()
                with caplog.at_level(logging.WARNING):
                    outcome = gate.process(text, "bash", tool_use_id="toolu_f")
                assert disk.failures > 0
                assert_untouched(gate, outcome, text, "store_failed")
                [record] = warnings_of(caplog)
                assert "No space left on device" in record.getMessage()
        outcome = gate.process(text, "bash")
        assert_spilled(gate, outcome, text, "bash")
        assert results(gate) == [filename_of(outcome.artifact)]  # type: ignore[arg-type]
        gate.close()


@pytest.mark.root
def test_a_full_tmpfs_fails_to_store_and_leaves_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A real kernel ENOSPC (root only, else skipped): 2 MiB into a 1 MiB tmpfs.
    with mounted_tmpfs(tmp_path / "tmpfs", "1m") as mount:
        gate = ToolResultExternalizer(mount / "session-a", event_store="memory")
        try:
            text = "q" * (2 << 20)
            with caplog.at_level(logging.WARNING):
                outcome = gate.process(text, "web_fetch")
            assert_untouched(gate, outcome, text, "store_failed")
            [record] = warnings_of(caplog)
            assert "No space left on device" in record.getMessage()
            # The space came back: a smaller spill fits.
            small = "r" * (DEFAULT_LIMIT + 10)
            assert_spilled(gate, gate.process(small, "web_fetch"), small, "web_fetch")
        finally:
            gate.close()


# S1.2 rule 6 and S1.4: spilled --------------------------------------------------------


def test_a_spill_stores_the_whole_output_and_previews_it(
    ext: ToolResultExternalizer,
) -> None:
    lines = big_log(6000)
    text = "\n".join(lines) + "\n"
    outcome = ext.process(text, "bash", tool_use_id="toolu_x")
    replacement = assert_spilled(ext, outcome, text, "bash")
    reference = outcome.artifact
    assert reference is not None
    assert results(ext) == ["tool_result_001.txt"]
    assert artifact_topics(ext.session) == ["spillvault:Artifact.Stored"]
    assert reference.content_sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert reference.source.source_id == (
        f"artifact:session-a:tool_result_001.txt:{reference.content_sha256[:12]}"
    )
    assert f"sha256: {reference.content_sha256}" in replacement
    assert replacement.split("\n")[2] == lines[0]  # the head follows the header
    assert replacement.endswith(lines[-1] + "\n")  # the tail ends the output
    page = ext.read_artifact(reference, offset=2999, limit=2)
    assert page == "\n".join(lines[2999:3001])
    assert [a.filename for a in ext.artifacts()] == ["tool_result_001.txt"]
    # make_pointer is the same replacement.
    assert ext.make_pointer(text, reference) == replacement


def test_spilled_previews_show_a_first_line_of_200_and_100000_chars(
    ext: ToolResultExternalizer,
) -> None:
    for width in (200, 100_000):
        text = "L" * width + "\n" + "next line\n" * 4_000
        outcome = ext.process(text, "bash")
        replacement = assert_spilled(ext, outcome, text, "bash")
        assert outcome.artifact is not None
        summary_line = replacement.split("\n")[1]
        assert summary_line.startswith("[summary: " + "L" * 159 + "\u2026 (4001 lines")
        assert len(outcome.artifact.summary) <= 240
        assert ext.read_artifact(outcome.artifact, 0, 1) == "L" * width


def test_a_spilled_text_without_newlines_keeps_its_edges(
    ext: ToolResultExternalizer,
) -> None:
    text = "".join(chr(0x4E00 + i % 2000) for i in range(40_000))
    outcome = ext.process(text, "bash")
    replacement = assert_spilled(ext, outcome, text, "bash")
    assert outcome.artifact is not None
    head = replacement.split("\n")[2]
    assert head
    assert text.startswith(head)
    tail = replacement.rsplit("\n", 1)[1]
    assert tail
    assert text.endswith(tail)
    assert ext.read_artifact(outcome.artifact, 0, 5) == text


# S1.6: key lines ----------------------------------------------------------------------


def test_key_lines_from_the_middle_point_at_their_real_line(
    ext: ToolResultExternalizer,
) -> None:
    lines = big_log(4000)
    lines[999] = "FAILED tests/test_io.py::test_flush - assert 3 == 4"
    lines[2344] = "ERROR: disk quota exceeded while writing shard 2345"
    text = "\n".join(lines)
    outcome = ext.process(text, "bash")
    replacement = assert_spilled(ext, outcome, text, "bash")
    assert outcome.artifact is not None
    shown = re.findall(r"^line (\d+): (.*)$", replacement, re.MULTILINE)
    assert ("2345", lines[2344]) in shown
    assert ("1000", lines[999]) in shown
    for number, line in shown:
        page = ext.read_artifact(outcome.artifact, offset=int(number) - 1, limit=1)
        assert page == line
    # The key lines were omitted from head and tail, not shown twice.
    assert replacement.count(lines[2344]) == 1


# Run in a child: a regression to a backtracking engine would hang, not fail.
GATE_IN_CHILD = """
    import json, sys
    from spillvault.adapters.session import ToolResultExternalizer
    from spillvault.domain.policy import SpillPolicy
    session, patterns, text = json.load(sys.stdin)
    policy = SpillPolicy.from_mapping({"key_line_patterns": patterns})
    ext = ToolResultExternalizer(session, policy=policy)
    outcome = ext.process(text, "bash")
    ext.close()
    print(json.dumps([outcome.reason, outcome.content]))
"""
FILLER = "".join(f"step {n} fine\n" for n in range(1, 3001))  # lines 1-3000


def test_a_catastrophic_key_line_pattern_cannot_hang_the_gate(
    session_dir: Path,
) -> None:
    # The review's case: exponential for a backtracking engine; S1.2: the gate returns.
    text = FILLER + "a" * 35 + "!\n" + "aaaa\n" + FILLER
    reason, content = json_from_child(
        GATE_IN_CHILD, [str(session_dir), [r"^(a+)+$"], text]
    )
    assert reason == "spilled"
    assert re.findall(r"^line (\d+): (.*)$", content, re.MULTILINE) == [
        ("3002", "aaaa")
    ]


def test_many_patterns_judge_a_hostile_100k_line_in_bounded_work(
    session_dir: Path,
) -> None:
    backtrackers = [r"^(a+)+$", r"(a|aa)+b", r"(a|a?)+c", r"(.*a){12}z", r"(a*)*d"]
    patterns = backtrackers + [f"(w{n}|w{n}w{n})+q" for n in range(59)]
    hostile = ("a" * 39 + "!") * 2500  # 100k characters; the first 500 are judged
    text = FILLER + hostile + "\naab\n" + FILLER
    reason, content = json_from_child(GATE_IN_CHILD, [str(session_dir), patterns, text])
    assert reason == "spilled"
    shown = re.findall(r"^line (\d+): (.*)$", content, re.MULTILINE)
    assert shown == [("3002", "aab")]


# S2.4: streams through the gate -------------------------------------------------------


def test_a_large_stream_spills_with_the_digest_of_its_raw_bytes(
    ext: ToolResultExternalizer,
) -> None:
    chunks = [b"compiling...\n", b"\xff\xfe not utf-8 \xc3(\n"]
    chunks += [b"progress %06d\n" % i for i in range(20_000)]
    chunks[10_000] = b"error: linker failed with exit code 1\n"
    chunks += [b"\xe2\x80", b"\xa8split sequence\n", b"done"]
    data = b"".join(chunks)
    assert len(data) > 4 * 2 * BASH_LIMIT  # the head/tail window path
    stream = ext.open_stream("bash", tool_use_id="toolu_stream")
    for chunk in chunks:
        stream.write(chunk)
    outcome = stream.close()
    assert outcome.reason == "spilled"
    reference = outcome.artifact
    assert reference is not None
    assert reference.handle == stream.handle
    assert reference.content_sha256 == hashlib.sha256(data).hexdigest()
    assert stored_bytes(ext, reference) == data  # verbatim, invalid bytes included
    recorded = ext.session.store.get_artifact(filename_of(reference))
    assert recorded is not None
    assert (recorded.state, recorded.tool_use_id) == ("sealed", "toolu_stream")
    replacement = outcome.content
    assert isinstance(replacement, str)
    assert replacement.startswith(HEADER_START)
    assert "tool_use_id: toolu_stream" in replacement
    assert len(replacement) <= BASH_LIMIT
    assert "\ufffd" in replacement  # previews decode with errors="replace"
    error = "error: linker failed with exit code 1"
    number = data.split(b"\n").index(error.encode()) + 1
    shown = re.findall(r"^line (\d+): (.*)$", replacement, re.MULTILINE)
    assert (str(number), error) in shown
    assert ext.read_artifact(reference, offset=number - 1, limit=1) == error


def test_a_stream_between_the_limit_and_its_windows_spills_whole(
    ext: ToolResultExternalizer,
) -> None:
    data = "caf\u00e9 \U0001f600 row\n".encode() * 4_000  # 60,000 chars
    stream = ext.open_stream("bash")
    for start in range(0, len(data), 4096):  # chunks split UTF-8 sequences
        stream.write(data[start : start + 4096])
    outcome = stream.close()
    text = data.decode()
    assert_spilled(ext, outcome, text, "bash")
    # The same preview process() gives for the same text (but for the name).
    again = ext.process(text, "bash")
    assert isinstance(again.content, str)
    assert outcome.artifact is not None
    assert again.artifact is not None
    assert outcome.content == as_if_for(again.content, again.artifact, outcome.artifact)


def test_a_small_stream_is_shown_whole_with_its_handle(
    ext: ToolResultExternalizer,
) -> None:
    # Fixed (reported): a short non-UTF-8 stream came back as under_limit text
    # with its artifact stored but no handle anywhere in the view.
    stream = ext.open_stream("bash")
    stream.write(b"all tests passed\n")
    stream.write(b"\xffend")
    outcome = stream.close()
    assert outcome.reason == "under_limit"
    reference = outcome.artifact
    assert reference is not None  # already on disk: kept, sealed, and shown
    assert stored_bytes(ext, reference) == b"all tests passed\n\xffend"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith(HEADER_START)
    view = parse_view(outcome.content)
    assert view.head == "all tests passed\n\ufffdend"  # whole, decoded
    assert (view.omitted_units, view.omitted_lines, view.tail) == (0, 0, "")
    assert reference.handle in outcome.content


def test_a_stream_is_readable_while_open(ext: ToolResultExternalizer) -> None:
    stream = ext.open_stream("bash", tool_use_id="toolu_live")
    assert ext.read_artifact(stream.handle) == ""
    stream.write(b"line 1\nline 2\n")
    assert ext.read_artifact(stream.handle) == "line 1\nline 2\n"
    stream.write(b"line 3 \xff")
    assert ext.read_artifact(stream.handle, offset=2, limit=1) == "line 3 \ufffd"
    assert (
        ext.read_artifact_bytes(stream.handle, 0, 100) == b"line 1\nline 2\nline 3 \xff"
    )
    assert ext.grep_artifact(stream.handle, "line 2").matches[0].line_number == 2
    recorded = ext.session.store.get_artifact(ext.store.resolve(stream.handle))
    assert recorded is not None
    assert recorded.state == "open"
    assert stream.close().reason == "under_limit"


def test_a_stream_decides_like_process_when_the_preview_budget_is_small(
    session_dir: Path,
) -> None:
    # BUG (reported): GateStream.close() decides from windows sized by the
    # *preview budget*; a stream bigger than two windows is called spilled
    # without measuring, though it can be under a limit set well above the budget.
    policy = SpillPolicy.from_mapping(
        {"tools": {"t": {"limit": 20_000, "unit": "chars", "preview_budget": 6_000}}}
    )
    gate = ToolResultExternalizer(session_dir, policy=policy, event_store="memory")
    try:
        text = "\U0001f600" * 12_500  # 12,500 chars (50,000 bytes) < 20,000
        assert gate.process(text, "t").reason == "under_limit"
        stream = gate.open_stream("t")
        stream.write(text.encode())
        outcome = stream.close()
        assert outcome.reason == "under_limit"
        assert outcome.artifact is not None
        assert isinstance(outcome.content, str)
        # Whole, with its handle: within the limit, though over the budget.
        assert parse_view(outcome.content).head == text
        assert outcome.artifact.handle in outcome.content
        assert len(outcome.content) <= 20_000
    finally:
        gate.close()


def test_a_stream_that_fails_mid_write_keeps_a_partial_artifact(
    session_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = InterceptingFS()
    with open_session(session_dir, fs=fs, event_store="memory") as session:
        gate = ToolResultExternalizer(session_dir, session=session)
        stream = gate.open_stream("bash", tool_use_id="toolu_p")
        first = b"".join(b"row %06d\n" % i for i in range(10_000))  # 110,000 bytes
        stream.write(first)
        with fs.around("write", FullDisk(1_000)):  # a short write lands, then ENOSPC
            stream.write(b"z" * 50_000)
            stream.write(b"dropped after the failure\n")
            with caplog.at_level(logging.WARNING):
                outcome = stream.close()
        assert outcome.reason == "store_failed"
        assert len(warnings_of(caplog)) == 1
        reference = outcome.artifact
        assert reference is not None
        kept = first + b"z" * 1_000
        assert stored_bytes(gate, reference) == kept
        assert reference.content_sha256 == hashlib.sha256(kept).hexdigest()
        recorded = session.store.get_artifact(filename_of(reference))
        assert recorded is not None
        assert recorded.state == "partial"
        assert isinstance(outcome.content, str)
        assert PARTIAL_MARK in outcome.content.split("\n", 1)[0]
        assert len(outcome.content) <= BASH_LIMIT
        gate.close()


def test_a_small_stream_that_fails_still_returns_store_failed(
    session_dir: Path,
) -> None:
    # BUG (reported): close() raises ValueError ("header and notice need ...
    # more than the 9 chars available") when the partial bytes are smaller than
    # a preview; S2.4 says it returns reason store_failed with the partial.
    fs = InterceptingFS()
    with open_session(session_dir, fs=fs, event_store="memory") as session:
        gate = ToolResultExternalizer(session_dir, session=session)
        stream = gate.open_stream("bash")
        stream.write(b"first\n")
        with fs.around("write", FullDisk(3)):
            stream.write(b"second\n")
        outcome = stream.close()
        assert outcome.reason == "store_failed"
        assert outcome.artifact is not None
        assert isinstance(outcome.content, str)
        view = parse_view(outcome.content)
        assert view.head == "first\nsec"  # what was stored, whole, with its handle
        assert PARTIAL_MARK in view.header
        assert outcome.artifact.handle in outcome.content
        assert stored_bytes(gate, outcome.artifact) == b"first\nsec"
        recorded = session.store.get_artifact(filename_of(outcome.artifact))
        assert recorded is not None
        assert recorded.state == "partial"
        gate.close()


# the seed calls: externalize, make_pointer, summarize ---------------------------------


def test_externalize_stores_even_under_the_limit(ext: ToolResultExternalizer) -> None:
    text = "small but wanted on disk\n" * 40  # 1,000 chars, far under 30,000
    result = ext.externalize(text, "bash")
    assert results(ext) == ["tool_result_001.txt"]
    assert stored_bytes(ext, result.artifact) == text.encode()
    assert result.context_text.startswith(HEADER_START)
    assert result.artifact.handle in result.context_text
    assert len(result.context_text) <= len(text)
    assert ext.make_pointer(text, result.artifact) == result.context_text


def test_externalize_stores_a_tiny_output_too(ext: ToolResultExternalizer) -> None:
    # BUG (reported): externalize("hello", ...) stores tool_result_001.txt and
    # then raises ValueError ("header and notice need 476 chars, more than the
    # 5 chars available"): the caller sees a failure and an orphan remains.
    result = ext.externalize("hello", "bash")
    assert stored_bytes(ext, result.artifact) == b"hello"
    assert result.artifact.handle in result.context_text


@pytest.mark.parametrize("summary", ["", "   ", "\n\t", "s" * 241])
def test_externalize_refuses_a_bad_summary_before_any_file(
    ext: ToolResultExternalizer, summary: str
) -> None:
    with pytest.raises(ValueError, match="summary"):
        ext.externalize("x" * 50_000, "bash", summary=summary)
    assert results(ext) == []
    assert artifact_topics(ext.session) == []


def test_externalize_uses_a_valid_caller_summary(ext: ToolResultExternalizer) -> None:
    summary = "s" * 240
    result = ext.externalize("x\n" * 30_000, "bash", summary=summary)
    assert result.artifact.summary == summary
    assert f"[summary: {summary}]" in result.context_text
    assert len(result.context_text) <= BASH_LIMIT


def test_externalize_raises_when_storing_fails(session_dir: Path) -> None:
    fs = InterceptingFS()
    with open_session(session_dir, fs=fs, event_store="memory") as session:
        gate = ToolResultExternalizer(session_dir, session=session)
        fs.around("write", FullDisk(0))
        with pytest.raises(OSError) as caught:
            gate.externalize("x" * 50_000, "bash")
        assert caught.value.errno == errno.ENOSPC
        assert results(gate) == []
        gate.close()


@pytest.mark.parametrize(
    "text",
    [
        "  \n\tfirst line\nsecond\n",
        "\x1b[31mred\x1b[0m\nrest",
        "\x00\nafter a NUL line\n",
        "\u200b\nafter a zero-width line\n",
    ],
    ids=["blank-lines", "ansi", "nul-line", "zwsp-line"],
)
def test_summarize_is_the_summary_the_artifact_gets(
    ext: ToolResultExternalizer, text: str
) -> None:
    # nul-line and zwsp-line FAIL (reported): summarize() picks a line that
    # str.strip() keeps but that has nothing printable, while the store skips it.
    body = text + "filler\n" * 10_000
    outcome = ext.process(body, "bash")
    assert outcome.artifact is not None
    assert ext.summarize(body, "bash") == outcome.artifact.summary


# properties ---------------------------------------------------------------------------

FRAGMENTS = [
    "a",
    "word ",
    "\u5b57",
    "\U0001f600",
    "e\u0301",
    "\r\n",
    "\n",
    "\u2028",
    "\x00",
    "\t",
    "\U0001f469\u200d\U0001f4bb",
    "\u00e9",
    "ERROR: boom",
    "0123",
    "\r",
]
PIECE = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.characters(exclude_categories=["Cs"])),
    min_size=1,
    max_size=12,
).map("".join)
TEXTS = st.lists(st.tuples(PIECE, st.integers(1, 300)), max_size=5).map(
    lambda segments: "".join(piece * count for piece, count in segments)
)

PROPERTY_TOP = {"max_handle_length": 128, "max_hint_length": 320}


@pytest.fixture(scope="module")
def shared_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    path = tmp_path_factory.mktemp("prop") / "s"
    with open_session(path, event_store="memory") as session:
        gate = ToolResultExternalizer(path, session=session)
        handle = gate.store.longest_handle()
        gate.store.close()
        assert len(handle.encode()) <= PROPERTY_TOP["max_handle_length"]
        assert len(gate.store.hint(handle).encode()) <= PROPERTY_TOP["max_hint_length"]
        yield session


@st.composite
def policies(draw: st.DrawFn) -> SpillPolicy:
    unit = draw(st.sampled_from([u.value for u in SizeUnit]))
    floor = smallest_budget(unit, "t", **PROPERTY_TOP)
    limit = draw(st.integers(floor, floor + 1500))
    table: dict[str, Any] = {"limit": limit, "unit": unit}
    if draw(st.booleans()):
        table["preview_budget"] = draw(st.integers(floor, limit))
    head, tail = draw(st.sampled_from([(1, 4), (1, 1), (3, 1)]))
    return SpillPolicy.from_mapping(
        {
            **PROPERTY_TOP,
            "tools": {"t": table},
            "head_ratio": head,
            "tail_ratio": tail,
            "max_key_lines": draw(st.sampled_from([0, 5])),
        }
    )


@settings(max_examples=50)
@given(policy=policies(), text=TEXTS)
def test_property_the_gate_spills_exactly_what_is_over_and_keeps_every_byte(
    shared_session: Session, policy: SpillPolicy, text: str
) -> None:
    gate = ToolResultExternalizer(
        shared_session.path, policy=policy, session=shared_session
    )
    try:
        limit = policy.limit_for("t")
        size = policy.measure(text, limit.unit)
        outcome = gate.process(text, "t", tool_use_id="toolu_p")
        event(f"{limit.unit}: {outcome.reason}")
        if size <= limit.limit:
            assert outcome.reason == "under_limit"
            assert outcome.content is text
            return
        assert outcome.reason == "spilled"
        assert outcome.artifact is not None
        replacement = outcome.content
        assert isinstance(replacement, str)
        assert policy.measure(replacement, limit.unit) <= limit.budget
        assert policy.measure(replacement, limit.unit) <= size
        assert stored_bytes(gate, outcome.artifact) == text.encode("utf-8")
        assert gate.make_pointer(text, outcome.artifact) == replacement
    finally:
        gate.store.close()


@settings(max_examples=50)
@given(
    policy=policies(),
    chunks=st.lists(
        st.one_of(
            st.binary(max_size=64),
            TEXTS.map(lambda text: text.encode("utf-8")),
        ),
        max_size=6,
    ),
)
def test_property_a_stream_keeps_its_raw_bytes_and_a_bounded_preview(
    shared_session: Session, policy: SpillPolicy, chunks: list[bytes]
) -> None:
    gate = ToolResultExternalizer(
        shared_session.path, policy=policy, session=shared_session
    )
    try:
        stream = gate.open_stream("t")
        for chunk in chunks:
            stream.write(chunk)
        outcome = stream.close()
        data = b"".join(chunks)
        event(f"{policy.limit_for('t').unit}: {outcome.reason}")
        reference = outcome.artifact
        assert reference is not None
        assert stored_bytes(gate, reference) == data
        assert reference.content_sha256 == hashlib.sha256(data).hexdigest()
        limit = policy.limit_for("t")
        text = data.decode("utf-8", "replace")
        view = outcome.content
        assert isinstance(view, str)
        assert reference.handle in view  # a stored stream is always shown
        size = policy.measure(view, limit.unit)
        if is_binary(data):
            assert outcome.reason == "binary"
            assert size <= limit.budget
        elif outcome.reason == "under_limit":
            assert policy.measure(text, limit.unit) <= limit.limit
            assert parse_view(view).head == clean_terminal(text)
            assert size <= limit.limit
        else:
            assert outcome.reason == "spilled"
            assert size <= limit.budget
    finally:
        gate.store.close()
