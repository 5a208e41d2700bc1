"""Clients for the MCP tests: the official SDK's, over stdio, to real servers.

The npm reference servers are installed by `make test` (`npm ci` in
tests/npm from the committed lock file); a test that needs them fails,
never skips, when they are missing.
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

NPM_DIR = Path(__file__).resolve().parents[1] / "npm"
_SERVERS = NPM_DIR / "node_modules" / "@modelcontextprotocol"
FIXTURE_SERVER = Path(__file__).with_name("mcp_fixture_server.py")
SPILLVAULT = Path(sys.executable).parent / "spillvault"


def _node_script(package: str) -> list[str]:
    script = _SERVERS / package / "dist" / "index.js"
    node = shutil.which("node")
    if node is None or not script.is_file():
        pytest.fail(
            f"the MCP reference server {package} is not installed: run `make test` "
            f"(it installs Node.js and runs `npm ci` in {NPM_DIR})"
        )
    return [node, str(script)]


def filesystem_server(root: Path) -> list[str]:
    """Return the command of the filesystem reference server over `root`."""
    return [*_node_script("server-filesystem"), str(root)]


def everything_server() -> list[str]:
    """Return the command of the everything reference server (stdio)."""
    return [*_node_script("server-everything"), "stdio"]


def fixture_server(*flags: str) -> list[str]:
    """Return the command of the edge-case fixture server."""
    # -P: the script's folder holds support modules that shadow the stdlib.
    return [sys.executable, "-P", str(FIXTURE_SERVER), *flags]


def proxied(upstream: list[str], *options: str) -> StdioServerParameters:
    """Return `spillvault mcp proxy [options] -- upstream` as server parameters."""
    return StdioServerParameters(
        command=str(SPILLVAULT),
        args=["mcp", "proxy", *options, "--", *upstream],
        env=dict(os.environ),
    )


def direct(command: list[str]) -> StdioServerParameters:
    """Return a server's own command as server parameters."""
    return StdioServerParameters(
        command=command[0], args=command[1:], env=dict(os.environ)
    )


def served(*options: str) -> StdioServerParameters:
    """Return `spillvault mcp serve [options]` as server parameters."""
    return StdioServerParameters(
        command=str(SPILLVAULT), args=["mcp", "serve", *options], env=dict(os.environ)
    )


@asynccontextmanager
async def connected(
    params: StdioServerParameters, *, errlog: TextIO = sys.stderr, **options: Any
) -> AsyncIterator[ClientSession]:
    """Yield an initialized client session to the server `params` start."""
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write, **options) as session,
    ):
        await session.initialize()
        yield session


def text_of(result: Any) -> str:
    """Return the text of a result's text blocks, joined."""
    return "".join(block.text for block in result.content if block.type == "text")
