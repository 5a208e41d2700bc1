"""Every call a notice or hint suggests is one the model tools accept (issue 15 §1).

The texts come from every place the code writes a suggestion for the model:
the spill notice (whole and windowed previews, each unit, streamed outputs,
the seed's pointer), microcompact's placeholder, and the continuation lines
of both model tools. Each suggested call is parsed, checked against the
tools' own JSON schemas, and then run: it must not come back as an error.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

import pytest

from spillvault import SpillPolicy, ToolLimit, open_session
from spillvault.adapters.harness import model_tools
from spillvault.adapters.harness.microcompact import placeholder_for
from spillvault.domain.enums import SizeUnit
from spillvault.domain.handles import MAX_HANDLE_LENGTH, parse_handle

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault import Session

CALL = re.compile(r"\b(read_artifact|grep_artifact)\(")
LOG = "".join(
    f"line {n}: {'ERROR disk full' if n % 97 == 0 else 'ok'} {'x' * (n % 50)}\n"
    for n in range(1, 3001)
)
SCHEMAS = {
    tool["name"]: tool["input_schema"]
    for tool in model_tools.tool_definitions("anthropic")
}


def suggested_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Return each `tool(key=value, ...)` in `text`, its arguments as JSON values."""
    calls = []
    for match in CALL.finditer(text):
        depth, end, quoted = 0, match.end() - 1, False
        for end in range(match.end() - 1, len(text)):
            char = text[end]
            if quoted:
                quoted = char != '"' or text[end - 1] == "\\"
            elif char == '"':
                quoted = True
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    break
        call = ast.parse(text[match.start() : end + 1], mode="eval").body
        assert isinstance(call, ast.Call), text
        assert not call.args, f"positional arguments in {ast.unparse(call)}"
        arguments = {kw.arg: _json_value(kw.value) for kw in call.keywords}
        calls.append((match[1], arguments))
    return calls


def _json_value(node: ast.expr) -> object:
    if isinstance(node, ast.Name) and node.id in {"true", "false"}:
        return node.id == "true"
    value = ast.literal_eval(node)
    assert isinstance(value, str | int), ast.unparse(node)
    return value


def check_against_schema(tool: str, arguments: dict[str, Any]) -> None:
    """Fail unless `arguments` satisfy the tool's schema."""
    schema = SCHEMAS[tool]
    properties = schema["properties"]
    assert set(arguments) <= set(properties), (tool, sorted(arguments))
    assert set(schema["required"]) <= set(arguments), (tool, sorted(arguments))
    for key, value in arguments.items():
        spec = properties[key]
        kind = {"string": str, "integer": int, "boolean": bool}[spec["type"]]
        assert isinstance(value, kind), (tool, key, value)
        if kind is int:
            assert not isinstance(value, bool)
            assert spec.get("minimum", value) <= value <= spec.get("maximum", value)
        if kind is str:
            assert len(value) >= spec.get("minLength", 0)


def assert_calls_work(session: Session, text: str) -> int:
    """Check and run every call `text` suggests; return how many there were."""
    calls = suggested_calls(text)
    for tool, arguments in calls:
        check_against_schema(tool, arguments)
        handle = arguments["handle"]
        assert parse_handle(handle) is not None, handle
        assert len(handle) <= MAX_HANDLE_LENGTH
        answer = session.externalizer.handle_tool_call(tool, arguments)
        assert not answer.startswith("error:"), (tool, arguments, answer)
    return len(calls)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    small = SpillPolicy(
        tool_limits={
            "bash": ToolLimit(6000, SizeUnit.CHARS),
            "grep": ToolLimit(8000, SizeUnit.BYTES),
            "web": ToolLimit(3000, SizeUnit.TOKENS),
            "read_artifact": ToolLimit(4000, SizeUnit.CHARS),
        },
        exempt_tools=frozenset({"read_artifact", "grep_artifact"}),
    )
    opened = open_session(tmp_path / "calls", policy=small)
    yield opened
    opened.close()


@pytest.mark.parametrize("tool", ["bash", "grep", "web"])
def test_spill_notices_suggest_calls_the_tools_accept(
    session: Session, tool: str
) -> None:
    outcome = session.externalizer.process(LOG, tool)
    assert outcome.reason == "spilled"
    assert outcome.artifact is not None
    text = str(outcome.content)
    assert f"full output: {outcome.artifact.handle};" in text
    # The notice's read and grep, and the grep of the collapsed repeats' note.
    assert "more like line" in text
    assert assert_calls_work(session, text) == 3


def test_a_streamed_output_and_the_seed_pointer_suggest_valid_calls(
    session: Session,
) -> None:
    ext = session.externalizer
    stream = ext.open_stream("grep")
    for start in range(0, len(LOG), 1000):
        stream.write(LOG[start : start + 1000].encode())
    streamed = stream.close()
    assert streamed.reason == "spilled"
    assert assert_calls_work(session, str(streamed.content)) == 3
    pointer = ext.externalize("tiny\n", "bash")
    assert assert_calls_work(session, pointer.context_text) == 2


def test_microcompact_placeholders_suggest_valid_calls(session: Session) -> None:
    outcome = session.externalizer.process(LOG, "bash")
    assert outcome.artifact is not None
    text = placeholder_for(outcome.artifact.handle)
    assert assert_calls_work(session, text) == 2


@pytest.mark.parametrize(
    "arguments",
    [
        {"start_line": 1, "limit": 50},  # more lines follow
        {"start_line": 2900, "limit": 5000},  # cut by the tool's budget
        {},
    ],
)
def test_read_continuations_are_valid_calls(
    session: Session, arguments: dict[str, Any]
) -> None:
    outcome = session.externalizer.process(LOG, "bash")
    assert outcome.artifact is not None
    answer = session.externalizer.handle_tool_call(
        "read_artifact", {"handle": outcome.artifact.handle, **arguments}
    )
    calls = suggested_calls(answer)
    assert len(calls) == 1
    assert calls[0][1]["start_line"] > arguments.get("start_line", 1)
    assert assert_calls_work(session, answer) == 1


@pytest.mark.parametrize(
    "arguments",
    [
        {"pattern": "ERROR", "max_matches": 3},
        {"pattern": "ERROR", "max_matches": 500, "context": 20},  # budget cut
        {"pattern": r"ERROR\s+disk", "regex": True, "max_matches": 2},
        {"pattern": 'say "ok"', "max_matches": 1},  # quoting survives
    ],
)
def test_grep_continuations_repeat_the_search_further_on(
    session: Session, arguments: dict[str, Any]
) -> None:
    log = LOG + "".join(f'say "ok" {n}\n' for n in range(5))
    outcome = session.externalizer.process(log, "bash")
    assert outcome.artifact is not None
    handle = outcome.artifact.handle
    answer = session.externalizer.handle_tool_call(
        "grep_artifact", {"handle": handle, **arguments}
    )
    calls = suggested_calls(answer)
    assert len(calls) == 1
    tool, following = calls[0]
    assert tool == "grep_artifact"
    assert following.pop("start_line") > 1
    assert following == {"handle": handle, **arguments}
    assert assert_calls_work(session, answer) == 1


def test_the_parser_sees_a_wrong_argument(session: Session) -> None:
    # The checker itself must be able to fail: an old-style call is refused.
    outcome = session.externalizer.process(LOG, "bash")
    assert outcome.artifact is not None
    old = f'read_artifact(handle="{outcome.artifact.handle}", offset=10)'
    ((tool, arguments),) = suggested_calls(old)
    with pytest.raises(AssertionError):
        check_against_schema(tool, arguments)
