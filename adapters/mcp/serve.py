"""`spillvault mcp serve`: the artifact tools as an MCP server, on the SDK.

The server is the SDK's low-level `Server`, so the handshake, both protocol
eras, pings and errors are the SDK's. A tool call runs on a worker thread:
a grep over a big artifact must not stall the connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from spillvault.adapters.mcp.artifact_tools import tool_specs

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from spillvault.adapters.mcp.artifact_tools import ArtifactTools

INSTRUCTIONS = (
    "Tool results too big for the context were stored whole by spillvault; "
    "their notices give a handle. read_artifact pages a stored result by line, "
    "grep_artifact searches it, list_artifacts shows what is stored."
)


def build_server(tools: ArtifactTools, *, version: str) -> Server[Any]:
    """Return an MCP server answering read_artifact, grep_artifact, list_artifacts."""
    listed = types.ListToolsResult(
        tools=[types.Tool.model_validate(spec) for spec in tool_specs(with_list=True)]
    )

    async def list_tools(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listed

    async def call_tool(
        _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        answer = await anyio.to_thread.run_sync(
            tools.call, params.name, params.arguments
        )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer.text)],
            is_error=answer.is_error,
        )

    return Server(
        "spillvault",
        version=version,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve_stdio(tools: ArtifactTools, *, version: str) -> None:
    """Serve the artifact tools on stdin and stdout until the client leaves."""
    server = build_server(tools, version=version)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


__all__ = ["INSTRUCTIONS", "build_server", "serve_stdio"]
