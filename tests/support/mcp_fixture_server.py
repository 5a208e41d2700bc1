"""A stdio MCP server for the proxy's edge cases, on the SDK's low-level Server.

Run as `python mcp_fixture_server.py [--clash]`. Its tools make what the
reference servers do not: large results of every shape, schemas of each
kind, a crash in the middle of a call, and a line on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

STDERR_MARK = "fixture-server: started, logging to stderr"
TINY_PNG = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9Q"
    "DwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
NUMBERS_SCHEMA = {
    "type": "object",
    "properties": {"values": {"type": "array", "items": {"type": "number"}}},
    "required": ["values"],
}
OPTIONAL_SCHEMA = {
    "type": "object",
    "properties": {"rows": {"type": "array", "items": {"type": "string"}}},
}
_SIZE = {"type": "object", "properties": {"lines": {"type": "integer"}}}


def lines_text(count: int, mark: str = "row") -> str:
    """Return `count` numbered lines; line 1 and the last are distinct."""
    return "".join(f"{mark} {i}: value={i * 7 % 1000}\n" for i in range(1, count + 1))


def _tools(*, clash: bool) -> list[types.Tool]:
    tools = [
        types.Tool(name="big_text", input_schema=_SIZE),
        types.Tool(name="big_error", input_schema=_SIZE),
        types.Tool(name="mixed_blocks", input_schema=_SIZE),
        types.Tool(name="numbers", input_schema=_SIZE, output_schema=NUMBERS_SCHEMA),
        types.Tool(name="rows", input_schema=_SIZE, output_schema=OPTIONAL_SCHEMA),
        types.Tool(name="crash", input_schema={"type": "object"}),
    ]
    if clash:
        tools.append(types.Tool(name="read_artifact", input_schema={"type": "object"}))
    return tools


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _result(name: str, count: int) -> types.CallToolResult:
    if name == "big_text":
        return types.CallToolResult(content=[_text(lines_text(count))])
    if name == "big_error":
        text = lines_text(count, "trace") + "Error: the fixture failed on purpose\n"
        return types.CallToolResult(content=[_text(text)], is_error=True)
    if name == "mixed_blocks":
        image = types.ImageContent(type="image", data=TINY_PNG, mime_type="image/png")
        first, second = (
            _text(lines_text(count, "first")),
            _text(lines_text(count, "second")),
        )
        return types.CallToolResult(content=[image, first, second, image])
    if name == "numbers":
        values = list(range(count))
        text = " ".join(map(str, values))
        return types.CallToolResult(
            content=[_text(text)], structured_content={"values": values}
        )
    if name == "rows":
        rows = [f"row {i}" for i in range(count)]
        return types.CallToolResult(
            content=[_text(f"{count} rows")], structured_content={"rows": rows}
        )
    if name == "crash":
        sys.stderr.write("fixture-server: crashing mid-call\n")
        sys.stderr.flush()
        os._exit(3)
    msg = f"unknown tool {name}"
    raise ValueError(msg)


def build(*, clash: bool) -> Server[Any]:
    """Return the fixture server."""

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_tools(clash=clash))

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> Any:
        count = int((params.arguments or {}).get("lines", 10))
        return _result(params.name, count)

    async def list_resources(_ctx: Any, _params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=uri.rpartition("/")[2])
                for uri in ("fixture://big", "fixture://small")
            ]
        )

    async def read_resource(
        _ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri == "fixture://big":
            text = "".join(f"line {n} of a resource\n" for n in range(1, 40_001))
        else:
            text = lines_text(3)
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=uri, text=text, mime_type="text/plain")
            ]
        )

    return Server(
        "spillvault-fixture",
        version="1",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


def main() -> None:
    """Serve on stdio."""
    sys.stderr.write(STDERR_MARK + "\n")
    sys.stderr.flush()
    server = build(clash="--clash" in sys.argv)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
