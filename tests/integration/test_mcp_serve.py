"""`spillvault mcp serve`: the artifact tools through the SDK's in-memory client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
from mcp import Client

from spillvault.adapters.harness.model_tools import tool_definitions
from spillvault.adapters.mcp.artifact_tools import ArtifactTools, tool_specs
from spillvault.adapters.mcp.limits import mcp_policy
from spillvault.adapters.mcp.serve import build_server
from spillvault.adapters.session import open_session
from spillvault.domain.errors import SpillPolicyError

if TYPE_CHECKING:
    from pathlib import Path


def _spill(root: Path, session_id: str, lines: int, tool: str = "bash") -> str:
    """Store a numbered output of `lines` lines in a session; return its handle."""
    text = "".join(f"{session_id} line {n}\n" for n in range(1, lines + 1))
    with open_session(root / session_id) as session:
        outcome = session.externalizer.process(text, tool)
    assert outcome.artifact is not None
    return outcome.artifact.handle


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def _call(tools: ArtifactTools, name: str, arguments: dict[str, Any]) -> Any:
    """Call one tool through the SDK's client, in memory; return the result."""

    async def scenario() -> Any:
        async with Client(build_server(tools, version="test")) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(scenario)


def test_lists_the_model_tools_and_list_artifacts() -> None:
    """The definitions are the model tools', plus list_artifacts; all read-only."""

    async def scenario() -> None:
        tools = ArtifactTools(mcp_policy())
        async with Client(build_server(tools, version="test")) as client:
            listed = (await client.list_tools()).tools
        model = tool_definitions("anthropic")
        assert [tool.name for tool in listed] == [
            *(tool["name"] for tool in model),
            "list_artifacts",
        ]
        for tool, definition in zip(listed, model, strict=False):
            assert tool.input_schema == definition["input_schema"]
        assert all(tool.annotations.read_only_hint for tool in listed)

    anyio.run(scenario)


def test_reads_and_greps_handles_of_any_session_under_the_root(
    session_root: Path,
) -> None:
    """One server reads every session's handles: each names its own session."""
    first = _spill(session_root, "alpha", 20_000)
    second = _spill(session_root, "beta", 20_000)
    tools = ArtifactTools(mcp_policy())
    page = _call(
        tools, "read_artifact", {"handle": first, "start_line": 12_345, "limit": 2}
    )
    assert _text(page).splitlines() == [
        "[lines 12345-12346 of 20000]",
        "12345: alpha line 12345",
        "12346: alpha line 12346",
        f'[more: read_artifact(handle="{first}", start_line=12347, limit=2)]',
    ]
    found = _call(tools, "grep_artifact", {"handle": second, "pattern": "line 19999"})
    assert _text(found).splitlines() == ["[1 match]", "19999: beta line 19999"]
    assert page.is_error is False
    tools.close()


def test_answers_are_capped_at_the_limit_with_a_continuation(
    session_root: Path,
) -> None:
    """A read never passes the MCP bound; it says where to go on."""
    handle = _spill(session_root, "alpha", 20_000)
    tools = ArtifactTools(mcp_policy(5_000))
    page = _call(tools, "read_artifact", {"handle": handle, "limit": 5_000})
    text = _text(page)
    assert len(text) <= 5_000
    last = text.splitlines()[-1]
    assert last.startswith(f'[more: read_artifact(handle="{handle}", start_line=')
    tools.close()


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"handle": "/etc/passwd"}, "not an artifact handle"),
        ({"handle": "../../etc/passwd"}, "not an artifact handle"),
        ({"handle": "nosuchsession/1"}, "no session 'nosuchsession'"),
        ({}, "handle is required"),
        ({"handle": "alpha/99"}, "error: unknown or inaccessible handle"),
        ({"handle": "alpha/1", "start_line": 0}, "start_line must be between"),
        ({"handle": "alpha/1", "bogus": 1}, "unknown argument(s) bogus"),
    ],
)
def test_bad_calls_are_errors_that_say_what_to_change(
    session_root: Path, arguments: dict[str, Any], expected: str
) -> None:
    """Every failure is an isError answer naming what was wrong, never a crash."""
    _spill(session_root, "alpha", 20_000)
    tools = ArtifactTools(mcp_policy())
    result = _call(tools, "read_artifact", arguments)
    assert result.is_error is True
    assert expected in _text(result)
    tools.close()


def test_a_scope_keeps_other_sessions_out_of_reach(session_root: Path) -> None:
    """With --session, another session's handle is refused."""
    _spill(session_root, "alpha", 20_000)
    other = _spill(session_root, "beta", 20_000)
    tools = ArtifactTools(mcp_policy(), scope=str(session_root / "alpha"))
    result = _call(tools, "read_artifact", {"handle": other})
    assert result.is_error is True
    assert "out of reach" in _text(result)
    listing = _text(_call(tools, "list_artifacts", {}))
    assert "alpha/1" in listing
    assert "beta/" not in listing
    tools.close()


def test_list_artifacts_pages_newest_first(session_root: Path) -> None:
    """Entries come newest first, in pages that say how to go on."""
    handles = [_spill(session_root, "alpha", 20_000, tool=f"t{n}") for n in range(3)]
    handles += [_spill(session_root, "beta", 20_000)]
    tools = ArtifactTools(mcp_policy())
    first = _text(_call(tools, "list_artifacts", {"limit": 2})).splitlines()
    assert first[0] == "[entries 1-2 of 4, newest first]"
    assert [row.split()[0] for row in first[1:3]] == [handles[3], handles[2]]
    assert first[3] == "[more: list_artifacts(start=3, limit=2)]"
    rest = _text(_call(tools, "list_artifacts", {"start": 3, "limit": 2})).splitlines()
    assert [row.split()[0] for row in rest[1:]] == [handles[1], handles[0]]
    only = _text(_call(tools, "list_artifacts", {"session": "beta"})).splitlines()
    assert [row.split()[0] for row in only[1:]] == [handles[3]]
    assert "20000 lines" in only[1]
    tools.close()


def test_list_artifacts_with_nothing_stored_says_so() -> None:
    """An empty root is an answer, not an error."""
    result = _call(ArtifactTools(mcp_policy()), "list_artifacts", {})
    assert _text(result) == "no stored tool results"
    assert result.is_error is False


def test_the_limit_has_a_floor_that_holds_a_notice() -> None:
    """A limit too small for the notice is refused with the range."""
    with pytest.raises(SpillPolicyError, match="from 4000 to"):
        mcp_policy(3_999)


def test_tool_specs_are_valid_mcp_tools() -> None:
    """The wire form validates as the SDK's Tool type."""
    import mcp_types as types  # noqa: PLC0415 - only this test needs the types

    for spec in tool_specs(with_list=True):
        assert types.Tool.model_validate(spec).name == spec["name"]
