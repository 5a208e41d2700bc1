"""The read/grep tools a model calls: definitions in both formats, and the handler."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import pytest
from anthropic.types import ToolParam
from openai.types.chat import ChatCompletionToolParam
from pydantic import TypeAdapter

from spillvault.adapters.harness.model_tools import MAX_READ_LIMIT
from spillvault.adapters.session import Session, open_session
from spillvault.domain.notice import GREP_TOOL, READ_TOOL

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LINES = 20_000
TEXT = "".join(
    f"line {n} {'ERROR disk full' if n % 1000 == 0 else 'ok'}\n"
    for n in range(1, LINES + 1)
)


@pytest.fixture
def session(session_dir: Path) -> Iterator[Session]:
    with open_session(session_dir) as opened:
        yield opened


@pytest.fixture
def handle(session: Session) -> str:
    artifact = session.externalizer.process(TEXT, "bash").artifact
    assert artifact is not None
    return artifact.handle


def call(session: Session, name: str, **arguments: object) -> str:
    return session.externalizer.handle_tool_call(name, arguments)


def test_definitions_are_accepted_by_each_sdks_own_types(session: Session) -> None:
    anthropic = session.externalizer.tool_definitions("anthropic")
    openai = session.externalizer.tool_definitions("openai")
    TypeAdapter(list[ToolParam]).validate_python(anthropic)
    TypeAdapter(list[ChatCompletionToolParam]).validate_python(openai)
    assert [t["name"] for t in anthropic] == [READ_TOOL, GREP_TOOL]
    assert [t["function"]["name"] for t in openai] == [READ_TOOL, GREP_TOOL]
    read = anthropic[0]["input_schema"]
    assert read["required"] == ["handle"]
    assert read["properties"]["start_line"]["minimum"] == 1  # 1-based
    assert openai[1]["function"]["parameters"] == anthropic[1]["input_schema"]
    with pytest.raises(ValueError, match="format"):
        session.externalizer.tool_definitions("gemini")  # type: ignore[arg-type]


def test_read_returns_numbered_lines_and_says_how_to_continue(
    session: Session, handle: str
) -> None:
    out = call(session, READ_TOOL, handle=handle, start_line=9_999, limit=3)
    assert out.splitlines() == [
        f"[lines 9999-10001 of {LINES}]",
        "9999: line 9999 ok",
        "10000: line 10000 ERROR disk full",
        "10001: line 10001 ok",
        f'[more: {READ_TOOL}(handle="{handle}", start_line=10002, limit=3)]',
    ]
    last = call(session, READ_TOOL, handle=handle, start_line=LINES - 1)
    assert last.splitlines() == [
        f"[lines {LINES - 1}-{LINES} of {LINES}]",
        f"{LINES - 1}: line {LINES - 1} ok",
        f"{LINES}: line {LINES} ERROR disk full",
    ]


def test_a_read_is_capped_at_the_budget_and_continues_where_it_stopped(
    session: Session, handle: str
) -> None:
    budget = session.externalizer.policy.limit_for(READ_TOOL).budget
    out = call(session, READ_TOOL, handle=handle, limit=MAX_READ_LIMIT)
    assert len(out) <= budget + 200  # the header and the continuation line
    follow = re.search(r"start_line=(\d+), limit=5000\)\]$", out)
    assert follow is not None
    shown = [line for line in out.splitlines() if re.match(r"\d+: ", line)]
    assert int(follow[1]) == len(shown) + 1
    more = call(session, READ_TOOL, handle=handle, start_line=int(follow[1]), limit=1)
    assert more.splitlines()[1] == f"{follow[1]}: line {follow[1]} ok"


def test_grep_numbers_matches_with_context_and_resumes(
    session: Session, handle: str
) -> None:
    out = call(
        session, GREP_TOOL, handle=handle, pattern="ERROR", max_matches=2, context=1
    )
    assert out.splitlines() == [
        "[2 matches]",
        "999- line 999 ok",
        "1000: line 1000 ERROR disk full",
        "1001- line 1001 ok",
        "1999- line 1999 ok",
        "2000: line 2000 ERROR disk full",
        "2001- line 2001 ok",
        (
            f'[more: {GREP_TOOL}(handle="{handle}", pattern="ERROR", context=1, '
            "max_matches=2, start_line=3000)]"
        ),
    ]
    rest = call(session, GREP_TOOL, handle=handle, pattern="ERROR", start_line=3000)
    found = [int(line.split(":")[0]) for line in rest.splitlines()[1:]]
    assert found == list(range(3000, LINES + 1, 1000))
    regex = call(
        session, GREP_TOOL, handle=handle, pattern=r"line 1\d{3} ERROR", regex=True
    )
    assert regex.splitlines()[1] == "1000: line 1000 ERROR disk full"
    assert call(session, GREP_TOOL, handle=handle, pattern="nothing") == (
        "no match for 'nothing' from line 1"
    )


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("read_file", {}, "unknown tool 'read_file'; available: read_artifact"),
        (READ_TOOL, {}, "handle is required"),
        (READ_TOOL, {"handle": "/etc/passwd"}, "unknown or inaccessible handle"),
        (
            READ_TOOL,
            {"handle": "HANDLE", "start_line": 0},
            "start_line must be between 1",
        ),
        (
            READ_TOOL,
            {"handle": "HANDLE", "start_line": "2"},
            "start_line must be an integer",
        ),
        (
            READ_TOOL,
            {"handle": "HANDLE", "start_line": 99_999},
            "past the end: the output",
        ),
        (READ_TOOL, {"handle": "HANDLE", "offset": 3}, "unknown argument(s) offset"),
        (GREP_TOOL, {"handle": "HANDLE"}, "pattern is required"),
        (
            GREP_TOOL,
            {"handle": "HANDLE", "pattern": "x", "regex": "yes"},
            "regex must be",
        ),
        (GREP_TOOL, {"handle": "HANDLE", "pattern": "("}, None),
    ],
)
def test_every_mistake_comes_back_as_an_error_line_the_model_can_act_on(
    session: Session,
    handle: str,
    name: str,
    arguments: dict[str, object],
    message: str | None,
) -> None:
    real = {k: handle if v == "HANDLE" else v for k, v in arguments.items()}
    out = session.externalizer.handle_tool_call(name, real)
    if message is None:  # a literal "(" is fine: grep is literal unless regex
        assert out.startswith("no match")
        out = session.externalizer.handle_tool_call(name, {**real, "regex": True})
        message = "error: "
    assert out.startswith("error: ") or message == "error: ", out
    assert message in out


def test_openai_style_json_arguments_are_accepted_and_bad_json_explained(
    session: Session, handle: str
) -> None:
    arguments = json.dumps({"handle": handle, "start_line": 2, "limit": 1})
    assert session.externalizer.handle_tool_call(READ_TOOL, arguments).splitlines()[
        1
    ] == ("2: line 2 ok")
    out = session.externalizer.handle_tool_call(READ_TOOL, "{not json")
    assert out.startswith("error: arguments are not valid JSON")


def test_the_tools_own_output_is_not_spilled_again_on_the_model_arm(
    session: Session, handle: str
) -> None:
    out = call(session, READ_TOOL, handle=handle, limit=MAX_READ_LIMIT)
    outcome = session.externalizer.process(out * 4, READ_TOOL)
    assert outcome.reason == "exempt_tool"


def test_reads_and_greps_show_lines_as_a_terminal_would(session: Session) -> None:
    colored = "".join(
        f"\x1b[32mok\x1b[0m {n}\r\x1b[32mok\x1b[0m step {n}\n" for n in range(1, 9001)
    )
    outcome = session.externalizer.process(colored, "bash")
    assert outcome.artifact is not None
    handle = outcome.artifact.handle
    page = call(session, READ_TOOL, handle=handle, start_line=7, limit=2)
    assert page.splitlines()[1:3] == ["7: ok step 7", "8: ok step 8"]
    found = call(session, GREP_TOOL, handle=handle, pattern="step 8000", context=1)
    assert found.splitlines()[1:4] == [
        "7999- ok step 7999",
        "8000: ok step 8000",
        "8001- ok step 8001",
    ]
    # the artifact keeps every raw byte
    raw = session.externalizer.read_artifact(handle, start_line=7, limit=1)
    assert raw == "\x1b[32mok\x1b[0m 7\r\x1b[32mok\x1b[0m step 7"


def test_grep_context_stops_at_the_last_line(session: Session) -> None:
    outcome = session.externalizer.process("x\n" * 40_000 + "last ERROR\n", "bash")
    assert outcome.artifact is not None
    found = call(
        session, GREP_TOOL, handle=outcome.artifact.handle, pattern="ERROR", context=2
    )
    # a final newline ends line 40001; it starts no line 40002
    assert found.splitlines() == [
        "[1 match]",
        "39999- x",
        "40000- x",
        "40001: last ERROR",
    ]
