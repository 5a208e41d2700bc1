"""`spillvault mcp proxy` end to end: the official client, the real reference servers.

Each test starts `spillvault mcp proxy -- node <server>` (or the edge-case
fixture server) and talks to it through the SDK's `ClientSession` over
`stdio_client`, as any MCP client would.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from spillvault.adapters.harness.model_tools import tool_definitions
from spillvault.adapters.mcp.results import META_KEY
from spillvault.adapters.mcp.structured import stub_rule
from spillvault.domain.policy import default_token_counter

from support.mcp_clients import (
    SPILLVAULT,
    connected,
    direct,
    everything_server,
    filesystem_server,
    fixture_server,
    proxied,
    served,
    text_of,
)
from support.mcp_fixture_server import STDERR_MARK, lines_text

if TYPE_CHECKING:
    from pathlib import Path

LINES = 120_000
ADDED = ["read_artifact", "grep_artifact"]


def _log_line(number: int) -> str:
    level = "ERROR" if number % 9973 == 0 else "INFO"
    return (
        f"2026-01-02T03:04:05Z {level} worker-{number % 7} handled request {number}\n"
    )


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A directory the filesystem server may read: a 5 MB log and a small file."""
    root = tmp_path / "files"
    root.mkdir()
    with (root / "big.log").open("w") as out:
        out.writelines(_log_line(n) for n in range(1, LINES + 1))
    (root / "small.txt").write_text("alpha\nbeta é ü\n")
    return root


def _whole_size(result: types.CallToolResult) -> int:
    """Return the characters a client may show: text blocks plus structured JSON."""
    structured = result.structured_content
    extra = 0 if structured is None else len(json.dumps(structured))
    return len(text_of(result)) + extra


def test_lists_the_upstream_tools_and_the_two_added(files: Path) -> None:
    """The listing is the server's own, then read_artifact and grep_artifact."""

    async def scenario() -> None:
        async with connected(direct(filesystem_server(files))) as plain:
            upstream = (await plain.list_tools()).tools
        async with connected(proxied(filesystem_server(files))) as client:
            listed = (await client.list_tools()).tools
        assert [tool.name for tool in listed] == [t.name for t in upstream] + ADDED
        # The server's definitions pass unchanged, but for a schema no stub fits.
        for mine, theirs in zip(listed, upstream, strict=False):
            if theirs.output_schema and stub_rule(theirs.output_schema) is None:
                theirs = theirs.model_copy(update={"output_schema": None})  # noqa: PLW2901
            assert mine == theirs
        kept = [tool.name for tool in listed if tool.output_schema is not None]
        assert "read_text_file" in kept
        assert "read_media_file" not in kept
        model = {tool["name"]: tool for tool in tool_definitions("anthropic")}
        for tool in listed[len(upstream) :]:
            assert tool.input_schema == model[tool.name]["input_schema"]
            assert tool.description == model[tool.name]["description"]

    anyio.run(scenario)


def test_a_5_mb_file_becomes_a_bounded_preview_that_pages_back_exactly(
    files: Path,
) -> None:
    """A big read is a preview with a handle; read and grep give the file's lines."""
    wanted = (files / "big.log").read_text().splitlines()

    async def scenario() -> None:
        async with connected(proxied(filesystem_server(files))) as client:
            await client.list_tools()
            path = str(files / "big.log")
            result = await client.call_tool("read_text_file", {"path": path})
            text = text_of(result)
            handle = result.meta[META_KEY]["content"]
            assert f"[tool result stored as {handle}" in text
            assert f'read_artifact(handle="{handle}"' in text
            # Under Claude Code's limits: 40,000 chars, about 20,000 tokens.
            assert _whole_size(result) <= 30_000
            assert default_token_counter(text) < 20_000
            # The schema's stub: the required string points at the stored text.
            assert handle in result.structured_content["content"]
            assert wanted[0] in text
            assert wanted[-1] in text
            page = await client.call_tool(
                "read_artifact", {"handle": handle, "start_line": 77_777, "limit": 3}
            )
            assert text_of(page).splitlines()[1:4] == [
                f"{n}: {wanted[n - 1]}" for n in (77_777, 77_778, 77_779)
            ]
            found = await client.call_tool(
                "grep_artifact", {"handle": handle, "pattern": "ERROR worker"}
            )
            errors = [n for n in range(1, LINES + 1) if n % 9973 == 0]
            assert text_of(found).splitlines()[1:] == [
                f"{n}: {wanted[n - 1]}" for n in errors
            ]

    anyio.run(scenario)


def test_a_small_file_comes_through_identical_to_a_direct_call(files: Path) -> None:
    """Under the limit the proxy forwards the server's very result."""

    async def scenario() -> None:
        call = ("read_text_file", {"path": str(files / "small.txt")})
        async with connected(direct(filesystem_server(files))) as plain:
            want = await plain.call_tool(*call)
        async with connected(proxied(filesystem_server(files))) as client:
            got = await client.call_tool(*call)
        assert got == want
        assert got.structured_content == {"content": "alpha\nbeta é ü\n"}

    anyio.run(scenario)


def test_a_call_before_any_listing_still_satisfies_the_schema(files: Path) -> None:
    """The proxy lists the tools itself, so the stub is schema-valid anyway."""

    async def scenario() -> None:
        async with connected(proxied(filesystem_server(files))) as client:
            path = str(files / "big.log")
            # The SDK client validates against the schema it lists afterwards.
            result = await client.call_tool("read_text_file", {"path": path})
            assert "read_artifact(" in result.structured_content["content"]

    anyio.run(scenario)


def test_a_result_under_the_limit_creates_no_session(
    files: Path, session_root: Path
) -> None:
    """A session is made on the first spill, not for every proxy process."""
    before = set(os.listdir(session_root))

    async def scenario() -> None:
        async with connected(proxied(filesystem_server(files))) as client:
            await client.call_tool("read_text_file", {"path": str(files / "small.txt")})

    anyio.run(scenario)
    assert set(os.listdir(session_root)) == before


def test_roots_and_other_server_requests_reach_the_client(files: Path) -> None:
    """The server's roots/list request crosses the proxy and its answer returns."""
    other = files / "other"
    other.mkdir()

    async def roots(_context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=other.as_uri())])

    async def scenario() -> None:
        params = proxied(filesystem_server(files))
        async with connected(params, list_roots_callback=roots) as client:
            for _ in range(400):  # the server asks for roots after initialized
                answer = await client.call_tool("list_allowed_directories", {})
                if str(other) in text_of(answer):
                    return
                await anyio.sleep(0.05)
            pytest.fail(f"the roots never reached the server: {text_of(answer)}")

    anyio.run(scenario)


# The everything server speaks 2025-11-25, where subscribe and logging exist.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_everything_server_features_pass_through_unchanged() -> None:
    """Resources, templates, prompts, completion, logging, structured output."""

    async def session_log(client: Any) -> list[Any]:
        resources = await client.list_resources()
        first = resources.resources[0].uri
        return [
            resources,
            await client.list_resource_templates(),
            await client.read_resource(first),
            await client.subscribe_resource(first),
            await client.unsubscribe_resource(first),
            await client.list_prompts(),
            await client.get_prompt("args-prompt", {"city": "Oslo", "state": "NO"}),
            await client.complete(
                types.PromptReference(type="ref/prompt", name="completable-prompt"),
                {"name": "department", "value": "E"},
            ),
            await client.set_logging_level("debug"),
            await client.call_tool("get-structured-content", {"location": "Chicago"}),
            await client.call_tool("get-sum", {"a": 2, "b": 3}),
        ]

    async def scenario() -> None:
        async with connected(direct(everything_server())) as plain:
            want = await session_log(plain)
        async with connected(proxied(everything_server())) as client:
            got = await session_log(client)
        assert got == want
        structured = got[-2]
        assert structured.structured_content is not None

    anyio.run(scenario)


def test_progress_notifications_and_cancellation_cross_the_proxy() -> None:
    """Progress arrives while a call runs; a cancelled call leaves the proxy usable."""
    seen: list[float] = []

    async def progress(done: float, _total: float | None, _message: str | None) -> None:
        seen.append(done)

    async def scenario() -> None:
        async with connected(proxied(everything_server())) as client:
            await client.call_tool(
                "trigger-long-running-operation",
                {"duration": 0.3, "steps": 3},
                progress_callback=progress,
            )
            assert seen == [1, 2, 3]
            with anyio.move_on_after(0.5) as scope:
                await client.call_tool(
                    "trigger-long-running-operation", {"duration": 60, "steps": 60}
                )
            assert scope.cancelled_caught
            echoed = await client.call_tool("echo", {"message": "still here"})
            assert text_of(echoed) == "Echo: still here"

    anyio.run(scenario)


def test_a_big_echo_from_the_everything_server_is_gated() -> None:
    """Any tool's text is gated, not only file reads."""
    message = "".join(f"word{n} " for n in range(60_000))

    async def scenario() -> None:
        async with connected(proxied(everything_server())) as client:
            result = await client.call_tool("echo", {"message": message})
            assert len(text_of(result)) <= 29_000
            handle = result.meta[META_KEY]["content"]
            found = await client.call_tool(
                "grep_artifact", {"handle": handle, "pattern": "word59999 "}
            )
            assert "1 match" in text_of(found)

    anyio.run(scenario)


def test_an_error_result_is_gated_and_keeps_is_error() -> None:
    """An isError result is stored and previewed like any other, and stays an error."""

    async def scenario() -> None:
        async with connected(proxied(fixture_server())) as client:
            result = await client.call_tool("big_error", {"lines": 20_000})
            assert result.is_error is True
            text = text_of(result)
            assert "is_error: true" in text
            assert "Error: the fixture failed on purpose" in text
            assert len(text) <= 29_000

    anyio.run(scenario)


def test_images_stay_in_place_and_text_blocks_become_one_preview() -> None:
    """Non-text blocks pass untouched; the text blocks are stored as one artifact."""

    async def scenario() -> None:
        async with connected(proxied(fixture_server())) as client:
            small = await client.call_tool("mixed_blocks", {"lines": 3})
            assert [b.type for b in small.content] == ["image", "text", "text", "image"]
            result = await client.call_tool("mixed_blocks", {"lines": 20_000})
            assert [b.type for b in result.content] == ["image", "text", "image"]
            assert result.content[0] == small.content[0]
            handle = result.meta[META_KEY]["content"]
            page = await client.call_tool(
                "read_artifact", {"handle": handle, "start_line": 20_000, "limit": 2}
            )
            assert text_of(page).splitlines()[1:3] == [
                "20000: first 20000: value=0",
                "20001: second 1: value=7",
            ]

    anyio.run(scenario)


def test_a_schema_no_stub_fits_is_dropped_and_its_big_copy_stored() -> None:
    """`numbers` requires an array: no outputSchema is forwarded, the copy is stored."""

    async def scenario() -> None:
        async with connected(proxied(fixture_server())) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert tools["numbers"].output_schema is None
            assert tools["rows"].output_schema is not None
            small = await client.call_tool("numbers", {"lines": 5})
            assert small.structured_content == {"values": [0, 1, 2, 3, 4]}
            big = await client.call_tool("numbers", {"lines": 20_000})
            assert big.structured_content is None
            handle = big.meta[META_KEY]["structuredContent"]
            assert handle != big.meta[META_KEY]["content"]
            page = await client.call_tool(
                "grep_artifact", {"handle": handle, "pattern": "19999"}
            )
            assert text_of(page).splitlines()[1:] == ["20002:   19999"]

    anyio.run(scenario)


def test_a_big_structured_copy_beside_small_text_becomes_an_empty_stub() -> None:
    """`rows` admits `{}`: the text stays, a pointer line is added, the copy stored."""

    async def scenario() -> None:
        async with connected(proxied(fixture_server())) as client:
            await client.list_tools()
            result = await client.call_tool("rows", {"lines": 5_000})
            assert result.structured_content == {}
            assert result.content[0].text == "5000 rows"
            handle = result.meta[META_KEY]["structuredContent"]
            assert f"structured content stored as JSON in {handle}" in (
                result.content[1].text
            )
            assert _whole_size(result) <= 30_000

    anyio.run(scenario)


def test_an_upstream_tool_named_like_an_added_one_is_refused() -> None:
    """Two tools of one name could not be told apart: listing fails with why."""

    async def scenario() -> None:
        async with connected(proxied(fixture_server("--clash"))) as client:
            with pytest.raises(
                MCPError, match="already has a tool named 'read_artifact'"
            ):
                await client.list_tools()

    anyio.run(scenario)


def test_an_upstream_crash_mid_call_is_a_clean_error_and_reads_go_on() -> None:
    """Pending and later calls fail at once; old handles still read; stderr passes."""
    with tempfile.TemporaryFile("w+") as errors:

        async def scenario() -> None:
            async with connected(proxied(fixture_server()), errlog=errors) as client:
                big = await client.call_tool("big_text", {"lines": 20_000})
                handle = big.meta[META_KEY]["content"]
                with anyio.fail_after(20):
                    with pytest.raises(
                        MCPError, match="is gone: it exited with status 3"
                    ):
                        await client.call_tool("crash", {})
                    with pytest.raises(MCPError, match="is gone"):
                        await client.call_tool("big_text", {"lines": 1})
                    listed = await client.list_tools()
                    page = await client.call_tool(
                        "read_artifact", {"handle": handle, "start_line": 19_999}
                    )
                assert [tool.name for tool in listed.tools] == ADDED
                assert text_of(page).splitlines()[1:] == [
                    "19999: row 19999: value=993",
                    "20000: row 20000: value=0",
                ]

        anyio.run(scenario)
        errors.seek(0)
        log = errors.read()
    assert STDERR_MARK in log
    assert "fixture-server: crashing mid-call" in log


def test_limit_bounds_every_result() -> None:
    """`--limit N` bounds a whole result to N characters."""

    async def scenario() -> None:
        params = proxied(fixture_server(), "--limit", "8000")
        async with connected(params) as client:
            result = await client.call_tool("big_text", {"lines": 5_000})
            assert 4_000 < _whole_size(result) <= 8_000
            page = await client.call_tool(
                "read_artifact",
                {"handle": result.meta[META_KEY]["content"], "limit": 5000},
            )
            assert len(text_of(page)) <= 8_000
            assert "[more: read_artifact(" in text_of(page)

    anyio.run(scenario)


def test_a_missing_upstream_command_fails_with_a_clear_message() -> None:
    """The proxy says which command it could not start, and exits non-zero."""
    done = subprocess.run(
        [str(SPILLVAULT), "mcp", "proxy", "--", "no-such-mcp-server-xyz"],
        input=b"",
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 4
    assert b"cannot start the upstream MCP server 'no-such-mcp-server-xyz'" in (
        done.stderr
    )
    assert done.stdout == b""


def test_a_big_resource_read_is_gated() -> None:
    """A resource's text is gated like a tool's; its handle reads the whole."""

    async def scenario() -> None:
        async with connected(proxied(fixture_server())) as client:
            result = await client.read_resource("fixture://big")
            (item,) = result.contents
            assert len(item.text) <= 29_000
            handle = result.meta[META_KEY]["contents"]
            page = await client.call_tool(
                "read_artifact", {"handle": handle, "start_line": 30_000, "limit": 1}
            )
            assert text_of(page).splitlines()[1] == "30000: line 30000 of a resource"
            small = await client.read_resource("fixture://small")
            assert small.contents[0].text == lines_text(3)

    anyio.run(scenario)


def test_serve_over_stdio_reads_what_a_proxy_stored(files: Path) -> None:
    """`spillvault mcp serve` reads and lists a handle another process made."""

    async def scenario() -> None:
        async with connected(proxied(filesystem_server(files))) as client:
            path = str(files / "big.log")
            result = await client.call_tool("read_text_file", {"path": path})
        handle = result.meta[META_KEY]["content"]
        async with connected(served()) as server:
            names = [tool.name for tool in (await server.list_tools()).tools]
            assert names == ["read_artifact", "grep_artifact", "list_artifacts"]
            page = await server.call_tool(
                "read_artifact", {"handle": handle, "start_line": LINES, "limit": 1}
            )
            assert text_of(page).splitlines()[1] == f"{LINES}: {_log_line(LINES)[:-1]}"
            listing = await server.call_tool("list_artifacts", {})
            assert handle in text_of(listing)

    anyio.run(scenario)


def _raw_exchange(command: list[str], requests: list[dict[str, Any]]) -> list[Any]:
    """Send JSON-RPC requests one at a time; return each response's result."""
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ)
    )
    assert process.stdin is not None
    assert process.stdout is not None
    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    results = []
    try:
        for number, (method, params) in enumerate(
            [("initialize", hello), *[(r["method"], r["params"]) for r in requests]]
        ):
            if number:  # `task` ids are only known once the call answered
                params = json.loads(  # noqa: PLW2901
                    json.dumps(params).replace(
                        "$TASK", str(results[-1].get("task", {}).get("taskId"))
                    )
                )
            request = {
                "jsonrpc": "2.0",
                "id": number,
                "method": method,
                "params": params,
            }
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            if number == 0:
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                process.stdin.write(json.dumps(note).encode() + b"\n")
                process.stdin.flush()
            while True:
                message = json.loads(process.stdout.readline())
                if message.get("id") == number:
                    results.append(message.get("result", message.get("error")))
                    break
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a server with a task still kept
            process.terminate()
            process.wait(timeout=30)
    return results[1:]


def test_a_task_augmented_call_and_its_result_cross_the_proxy() -> None:
    """tools/call with a task, then tasks/result: the same answers as direct."""
    requests = [
        {
            "method": "tools/call",
            "params": {
                "name": "simulate-research-query",
                "arguments": {"topic": "gc"},
                "task": {"ttl": 60_000},
            },
        },
        {"method": "tasks/result", "params": {"taskId": "$TASK"}},
    ]
    upstream = everything_server()
    want = _raw_exchange(upstream, requests)
    spillvault = [str(SPILLVAULT), "mcp", "proxy", "--", *upstream]
    got = _raw_exchange(spillvault, requests)
    assert "task" in got[0]
    assert got[1]["content"] == want[1]["content"]
    assert got[1]["_meta"]["io.modelcontextprotocol/related-task"] == {
        "taskId": got[0]["task"]["taskId"]
    }


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_server_notifications_reach_the_client() -> None:
    """list_changed and log messages the server sends arrive through the proxy."""
    logged: list[types.LoggingMessageNotificationParams] = []
    seen: list[str] = []
    both = anyio.Event()

    def check() -> None:
        if logged and "notifications/tools/list_changed" in seen:
            both.set()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)
        check()

    async def on_message(message: Any) -> None:
        method = getattr(message, "method", None)
        if isinstance(method, str):
            seen.append(method)
        check()

    async def scenario() -> None:
        params = proxied(everything_server())
        async with connected(
            params, logging_callback=on_log, message_handler=on_message
        ) as client:
            await client.set_logging_level("debug")
            await client.call_tool("toggle-simulated-logging", {})
            with anyio.fail_after(60):
                await both.wait()
            await client.call_tool("toggle-simulated-logging", {})

    anyio.run(scenario)
    assert "notifications/tools/list_changed" in seen
    # The server picks its simulated levels at random, from all of RFC 5424's.
    levels = {
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    }
    assert logged[0].level in levels
    assert logged[0].data
