"""What a command did, kept with its output and shown in the header (issue 15 §2)."""

from __future__ import annotations

import json
from dataclasses import replace
from hashlib import sha256
from typing import TYPE_CHECKING

import pytest
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Mapper,
    UUIDAsHex,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from spillvault.domain.artifact import Artifact, ArtifactContent
from spillvault.domain.command import SIGNAL_NAME_MAX, CommandFacts, duration_text
from spillvault.domain.enums import SizeUnit
from spillvault.domain.notice import (
    COMMAND_SHOWN_CHARS,
    PreviewSource,
    clip_shown,
    fixed_parts_fit,
    render_header,
    render_notice,
    worst_fixed_size,
)
from spillvault.domain.policy import SpillPolicy, ToolLimit

from support.leases import T0

if TYPE_CHECKING:
    from uuid import UUID

POLICY = SpillPolicy(max_handle_length=64, max_hint_length=100)
SOURCE = PreviewSource(
    source_id="artifact:sess:tool_result_001.txt:0123456789ab",
    summary="collected 3 items (400 lines, 9000 bytes)",
    tool_name="t",
    content_sha256="ab" * 32,
    handle="sess/1",
    hint="spillvault read sess/1",
    total_lines=400,
    total_bytes=9000,
)
PYTEST = CommandFacts(("pytest", "-x", "tests"), exit_status=1, duration_ms=12_480)
LARGEST = 2**64 - 1


def command_line_of(facts: CommandFacts) -> str:
    """Return the header's command line for `facts`."""
    header = render_header(replace(SOURCE, command=facts))
    first, summary, command, rest = header.split("\n")
    assert first.startswith("[tool result stored as ")
    assert summary.startswith("[summary: ")
    assert rest == ""
    return command


# ---------------------------------------------------------------- the value


def test_facts_round_trip_through_their_primitive_payload() -> None:
    killed = CommandFacts(("sleep", "9"), 143, 5, signal="SIGTERM")
    for facts in (PYTEST, killed, replace(killed, timed_out=True, exit_status=124)):
        payload = facts.to_payload()
        assert json.loads(json.dumps(payload)) == payload
        assert CommandFacts.from_payload(payload) == facts
    assert PYTEST.to_payload() == {
        "argv": ["pytest", "-x", "tests"],
        "exit_status": 1,
        "duration_ms": 12_480,
        "signal": None,
        "timed_out": False,
    }


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"argv": ()}, ValueError),
        ({"argv": ["ls"]}, ValueError),  # a tuple, so the value stays frozen
        ({"argv": ("ls", b"-l")}, TypeError),
        ({"argv": ("ls", "\udcff")}, ValueError),  # an event cannot carry it
        ({"exit_status": -15}, ValueError),
        ({"exit_status": 2**64}, ValueError),
        ({"exit_status": True}, TypeError),
        ({"duration_ms": -1}, ValueError),
        ({"duration_ms": 1.5}, TypeError),
        ({"signal": "TERM"}, ValueError),
        ({"signal": "SIGTERM\n"}, ValueError),
        ({"signal": "SIG" + "A" * SIGNAL_NAME_MAX}, ValueError),
    ],
)
def test_facts_no_command_run_has_are_refused(
    changes: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        replace(PYTEST, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("milliseconds", "shown"),
    [
        (0, "0.0s"),
        (99, "0.0s"),
        (999, "0.9s"),
        (12_480, "12.4s"),
        (3_600_000, "3600.0s"),
    ],
)
def test_durations_show_seconds_to_a_tenth_cut_not_rounded(
    milliseconds: int, shown: str
) -> None:
    assert duration_text(milliseconds) == shown


# ---------------------------------------------------------------- the header


def test_the_header_says_what_ran_how_it_ended_and_how_long_it_took() -> None:
    assert render_header(SOURCE).count("\n") == 2  # no command: as before
    assert command_line_of(PYTEST) == (
        "[command: pytest -x tests; exit: 1; duration: 12.4s]"
    )
    exit_3 = CommandFacts(("bash", "-c", "make; exit 3"), 3, 40)
    assert command_line_of(exit_3) == (
        "[command: bash -c 'make; exit 3'; exit: 3; duration: 0.0s]"
    )
    killed = CommandFacts(("sleep", "60"), 143, 2_000, signal="SIGTERM")
    assert "; exit: 143 (SIGTERM); " in command_line_of(killed)
    late = CommandFacts(("sleep", "60"), 124, 1_000, signal="SIGTERM", timed_out=True)
    assert "; exit: 124 (timed out); " in command_line_of(late)


def test_control_and_line_separator_characters_stay_escaped_on_one_line() -> None:
    facts = CommandFacts(("printf", "a\nb\x1b[31m\u2028c\rd\x7f"), 0, 1)
    line = command_line_of(facts)
    assert line == (
        "[command: printf 'a\\x0ab\\x1b[31m\\u2028c\\x0dd\\x7f'; exit: 0; "
        "duration: 0.0s]"
    )


def test_a_huge_command_line_is_clipped_and_says_so() -> None:
    facts = CommandFacts(("echo", "x" * 5_000), 0, 1)
    line = command_line_of(facts)
    shown = line.removeprefix("[command: ").split("; exit: ")[0]
    assert len(shown) == COMMAND_SHOWN_CHARS
    assert shown == "echo " + "x" * (COMMAND_SHOWN_CHARS - 8) + "..."
    assert line.endswith("; exit: 0; duration: 0.0s]")


@pytest.mark.parametrize(
    ("piece", "shown"),
    [
        ("e\u0301", "e\u0301"),  # a combining mark is never cut off its base
        ("\U0001f44d\U0001f3fd", "\U0001f44d\U0001f3fd"),  # nor a skin tone
        ("\n", "\\x0a"),  # an escape shows whole or not at all
        ("\u2028", "\\u2028"),
    ],
)
def test_the_clip_falls_between_clusters_and_escapes(piece: str, shown: str) -> None:
    clipped = clip_shown("x" * 150 + piece * 200, COMMAND_SHOWN_CHARS)
    assert len(clipped) <= COMMAND_SHOWN_CHARS
    kept = clipped.removeprefix("x" * 150).removesuffix("...")
    assert clipped == "x" * 150 + kept + "..."
    assert kept == shown * (len(kept) // len(shown))
    # as late as whole pieces allow
    assert len(kept) > COMMAND_SHOWN_CHARS - 150 - len("...") - len(shown)


def test_a_line_that_fits_is_not_clipped() -> None:
    assert clip_shown("a\tb", 6) == "a\\x09b"
    assert clip_shown("a\tb", 5) == "a..."
    assert clip_shown("", 3) == ""


# ---------------------------------------------------------------- pricing

argv_text = st.text(
    st.sampled_from(["!", "a", " ", "'", "\\", "é", "字", "😀", "\u0301", "\n"])
    | st.characters(codec="utf-8"),  # argv is valid Unicode: no surrogate
    max_size=300,
)
signals = st.none() | st.from_regex(
    rf"SIG[A-Z0-9+]{{1,{SIGNAL_NAME_MAX - 3}}}", fullmatch=True
)


@settings(max_examples=150)
@given(
    unit=st.sampled_from(list(SizeUnit)),
    argv=st.lists(argv_text, min_size=1, max_size=12).map(tuple)
    | st.sampled_from([("!" * 5_000,), ("😀" * 5_000,), ("x",) * 2_000]),
    exit_status=st.integers(0, LARGEST),
    duration_ms=st.integers(0, LARGEST),
    signal=signals,
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
def test_the_worst_case_prices_every_command_line(
    *,
    unit: SizeUnit,
    argv: tuple[str, ...],
    exit_status: int,
    duration_ms: int,
    signal: str | None,
    flags: tuple[bool, bool, bool],
) -> None:
    timed_out, is_error, partial = flags
    facts = CommandFacts(argv, exit_status, duration_ms, signal, timed_out)
    source = replace(SOURCE, command=facts, is_error=is_error, partial=partial)
    worst = worst_fixed_size(POLICY, "t", unit, is_error=True, with_command=True)
    for notice_unit in {unit, SizeUnit.BYTES}:
        notice = render_notice(source, 399, 8_000, notice_unit, first_line=2)
        fixed = render_header(source) + "\n" + notice
        assert POLICY.measure(fixed, unit) <= worst


@pytest.mark.parametrize(("unit", "slack"), [("chars", 0), ("bytes", 6 + 72)])
def test_the_command_line_is_priced_nearly_exactly(unit: SizeUnit, slack: int) -> None:
    # The widest line: 198 characters quoted, a 24-letter signal, 20-digit
    # numbers. In bytes shlex's two quotes are ASCII and so are signal names.
    fill = "!" if unit == "chars" else "😀"
    facts = CommandFacts((fill * 198,), LARGEST, LARGEST, "SIG" + "A" * 21)
    line = command_line_of(facts) + "\n"
    added = worst_fixed_size(POLICY, "t", unit, with_command=True) - worst_fixed_size(
        POLICY, "t", unit
    )
    assert 0 <= added - POLICY.measure(line, unit) <= slack


def test_a_call_with_a_command_fits_only_a_budget_for_its_line() -> None:
    unit = SizeUnit.CHARS
    plain = worst_fixed_size(POLICY, "t", unit, is_error=True)
    policy = replace(POLICY, tool_limits={"t": ToolLimit(plain, unit)})
    assert fixed_parts_fit(policy, "t", is_error=True)
    assert not fixed_parts_fit(policy, "t", is_error=True, with_command=True)
    wider = worst_fixed_size(POLICY, "t", unit, is_error=True, with_command=True)
    policy = replace(POLICY, tool_limits={"t": ToolLimit(wider, unit)})
    assert fixed_parts_fit(policy, "t", is_error=True, with_command=True)


# ---------------------------------------------------------------- the aggregate


def content(data: bytes) -> ArtifactContent:
    return ArtifactContent(
        sha256(data).hexdigest(),
        len(data),
        data.count(b"\n"),
        (sha256(data).hexdigest(),),
        (data.count(b"\n"),),
    )


def test_the_artifact_keeps_the_facts_it_was_stored_or_sealed_with() -> None:
    stored = Artifact.store(
        "tool_result_001.txt",
        content(b"out\n"),
        source_tool="bash",
        tool_use_id=None,
        is_error=False,
        captured_at=T0,
        summary="out",
        command=PYTEST,
    )
    assert stored.command_facts == PYTEST
    plain = Artifact.open_stream(
        "tool_result_002.txt", source_tool="bash", tool_use_id=None, opened_at=T0
    )
    assert plain.command_facts is None
    killed = replace(PYTEST, exit_status=143, signal="SIGTERM")
    plain.seal_partial(content(b"cut\n"), summary="cut", sealed_at=T0, command=killed)
    assert plain.command_facts == killed
    replayed = None
    for event in plain.collect_events():
        replayed = event.mutate(replayed)
    assert replayed is not None
    assert replayed.command_facts == killed


def mapper() -> Mapper[UUID]:
    transcoder = JSONTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    return Mapper(transcoder=transcoder)


def as_recorded_before_commands(event: object) -> object:
    """Store `event`, drop its `command` key as older records lack it, load it."""
    events = mapper()
    stored = events.to_stored_event(event)  # type: ignore[arg-type]
    state = json.loads(stored.state)
    state.pop("command", None)
    return events.to_domain_event(replace(stored, state=json.dumps(state).encode()))


def test_events_recorded_before_commands_were_kept_still_load() -> None:
    stored = Artifact.store(
        "tool_result_001.txt",
        content(b"out\n"),
        source_tool="bash",
        tool_use_id="tu-1",
        is_error=False,
        captured_at=T0,
        summary="out",
    )
    streamed = Artifact.open_stream(
        "tool_result_002.txt", source_tool="bash", tool_use_id=None, opened_at=T0
    )
    streamed.seal(content(b"all\n"), summary="all", sealed_at=T0)
    for artifact in (stored, streamed):
        replayed = None
        for event in artifact.collect_events():
            old = as_recorded_before_commands(event)
            assert "command" not in vars(old)
            replayed = old.mutate(replayed)  # type: ignore[attr-defined]
        assert replayed is not None
        assert (replayed.state, replayed.command_facts) == ("sealed", None)
        assert replayed.content == artifact.content
