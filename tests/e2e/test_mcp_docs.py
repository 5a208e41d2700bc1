"""The MCP client configurations in docs/mcp.md start what they say (issue 16).

tests/e2e/test_docs.py checks that each JSON block parses; the `claude` lines
and Codex's TOML cannot run there. This file reads every configuration snippet
under docs/mcp.md's "Configuration" (json with `json.loads`, toml with
`tomllib`, sh lines with `shlex.split`), finds each MCP server entry in it, and
checks that the entry starts `spillvault mcp serve|proxy` with arguments the
real CLI parser takes, and that a proxy's upstream is the filesystem example.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.cli.main import build_parser

if TYPE_CHECKING:
    import argparse

ROOT = Path(__file__).resolve().parents[2]
MCP_DOC = ROOT / "docs" / "mcp.md"
README = ROOT / "README.md"
CONFIGURATION = "Configuration"
CLIENTS = ("Claude Code", "Codex", "OpenCode", "Cursor")
FILESYSTEM = ("npx", "-y", "@modelcontextprotocol/server-filesystem")
OPENCODE_SCHEMA = "https://opencode.ai/config.json"
_BLOCK = re.compile(
    r"^```(?P<language>\w*)\n(?P<text>.*?)^```$", re.MULTILINE | re.DOTALL
)
_HEADING = re.compile(r"^(?P<level>#{1,3}) (?P<title>.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """A fenced block and the headings it sits under."""

    language: str
    text: str
    section: str  # the `##` heading
    heading: str  # the nearest heading, `##` or `###`
    line: int


@dataclass(frozen=True)
class Server:
    """One MCP server entry: the client it configures and the argv it starts."""

    client: str
    argv: tuple[str, ...]
    where: str


def _blocks(path: Path) -> list[Block]:
    """Return the fenced blocks of a Markdown file, each with its headings."""
    text = path.read_text()
    fences = list(_BLOCK.finditer(text))
    headings = [
        (m.start(), len(m["level"]), m["title"])
        for m in _HEADING.finditer(text)
        if not any(f.start() < m.start() < f.end() for f in fences)  # a # comment
    ]
    blocks = []
    for match in fences:
        above = [h for h in headings if h[0] < match.start()]
        sections = [h for h in above if h[1] <= 2]
        blocks.append(
            Block(
                language=match["language"],
                text=match["text"],
                section=sections[-1][2] if sections else "",
                heading=above[-1][2] if above else "",
                line=text.count("\n", 0, match.start()) + 1,
            )
        )
    return blocks


def _command_lines(text: str) -> list[list[str]]:
    """Return each command line of a sh block as argv, continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [shlex.split(line, comments=True) for line in joined.splitlines()]
    return [argv for argv in lines if argv]


def _entry_argv(entry: object, *, where: str) -> tuple[str, ...]:
    """Return the argv of a Claude Code, Cursor or Codex entry, checking its shape."""
    assert isinstance(entry, dict), where
    command, args = entry.get("command"), entry.get("args", [])
    assert isinstance(command, str), f"{where}: command must be a string"
    assert isinstance(args, list), f"{where}: args must be a list"
    assert all(isinstance(a, str) for a in args), f"{where}: args must be strings"
    env = entry.get("env", {})
    assert isinstance(env, dict), f"{where}: env must be a table of strings"
    assert all(isinstance(v, str) for v in env.values()), f"{where}: env values"
    return (command, *args)


def _opencode_argv(entry: object, *, where: str) -> tuple[str, ...]:
    """Return the argv of an OpenCode entry, checking its shape."""
    assert isinstance(entry, dict), where
    assert entry.get("type") == "local", f"{where}: an OpenCode server is local"
    assert entry.get("enabled") is True, f"{where}: enabled must be true"
    command = entry.get("command")
    assert isinstance(command, list), f"{where}: command must be an array"
    assert command, f"{where}: command must not be empty"
    assert all(isinstance(a, str) for a in command), f"{where}: command strings"
    return tuple(command)


def _servers_in(block: Block, origin: str) -> list[Server]:
    """Return the MCP server entries a configuration snippet holds."""
    where = f"{origin}:{block.line} ({block.heading})"
    found: list[tuple[str, tuple[str, ...]]] = []
    if block.language == "json":
        data = json.loads(block.text)
        if "mcpServers" in data:
            for name, entry in data["mcpServers"].items():
                found.append((name, _entry_argv(entry, where=f"{where} {name}")))
        if "mcp" in data:
            assert data.get("$schema") == OPENCODE_SCHEMA, f"{where}: $schema"
            for name, entry in data["mcp"].items():
                found.append((name, _opencode_argv(entry, where=f"{where} {name}")))
    elif block.language == "toml":
        data = tomllib.loads(block.text)
        for name, entry in data.get("mcp_servers", {}).items():
            found.append((name, _entry_argv(entry, where=f"{where} {name}")))
    elif block.language == "sh":
        for argv in _command_lines(block.text):
            if argv[:3] == ["claude", "mcp", "add"]:
                assert "--" in argv, f"{where}: {argv} has no -- before its command"
                end = argv.index("--")
                name = argv[end - 1]
                found.append((name, tuple(argv[end + 1 :])))
    return [Server(block.heading, argv, f"{where} {name}") for name, argv in found]


def _configuration_blocks() -> list[Block]:
    """Return the blocks under docs/mcp.md's Configuration section."""
    return [b for b in _blocks(MCP_DOC) if b.section == CONFIGURATION]


def _doc_servers() -> list[Server]:
    """Return every server entry under docs/mcp.md's Configuration section."""
    return [
        server
        for block in _configuration_blocks()
        for server in _servers_in(block, "docs/mcp.md")
    ]


def _snippets() -> list[tuple[str, Block]]:
    """Return the snippets to check: docs/mcp.md's, and README's `claude` lines."""
    readme = [
        ("README.md", block)
        for block in _blocks(README)
        if block.language == "sh" and "claude mcp add" in block.text
    ]
    return [("docs/mcp.md", b) for b in _configuration_blocks()] + readme


SNIPPETS = _snippets()


def _parsed(argv: list[str] | tuple[str, ...]) -> argparse.Namespace:
    """Parse spillvault's arguments with the real parser; fail with its message."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stderr):
            return build_parser().parse_args(list(argv))
    except SystemExit as exit_:
        msg = f"spillvault {shlex.join(argv)} does not parse: {stderr.getvalue()}"
        raise AssertionError(msg) from exit_


def test_the_entry_point_is_installed() -> None:
    """The configurations start `spillvault`: this environment has it, with `mcp`."""
    beside = Path(sys.executable).parent / "spillvault"
    entry = str(beside) if beside.exists() else shutil.which("spillvault")
    assert entry is not None, "no spillvault entry point beside python or on PATH"
    assert os.access(entry, os.X_OK), entry
    done = subprocess.run(
        [entry, "mcp", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout
    assert "proxy" in done.stdout


def test_every_client_has_a_serve_and_a_proxy_entry() -> None:
    """Each of the four clients gets both commands, under its own heading."""
    seen: dict[str, set[str]] = {}
    for server in _doc_servers():
        if server.argv[:2] == ("spillvault", "mcp") and len(server.argv) > 2:
            seen.setdefault(server.client, set()).add(server.argv[2])
    for client in CLIENTS:
        assert seen.get(client) == {"serve", "proxy"}, (client, seen)
    assert set(seen) == set(CLIENTS), f"entries under other headings: {sorted(seen)}"


def test_the_readme_shows_a_claude_code_line() -> None:
    """README.md's `claude mcp add` example is among the snippets checked."""
    readme = [block for origin, block in SNIPPETS if origin == "README.md"]
    assert len(readme) == 1, readme


def _check_server(server: Server) -> None:
    """Check that an entry starts `spillvault mcp …` as the real parser takes it."""
    assert server.argv[0] == "spillvault", f"{server.where}: starts {server.argv[0]}"
    args = _parsed(server.argv[1:])
    # Only the `mcp` subcommand sets mcp_command.
    assert getattr(args, "mcp_command", None) in {"serve", "proxy"}, server.where
    if args.mcp_command == "serve":
        assert args.command == "mcp", server.where
        return
    # `proxy` keeps the upstream command in args.command (REMAINDER)
    own = list(server.argv[1:])
    assert "--" in own, f"{server.where}: the upstream command must follow --"
    upstream = own[own.index("--") + 1 :]
    assert args.command in (["--", *upstream], upstream), server.where
    assert tuple(upstream[:3]) == FILESYSTEM, f"{server.where}: {upstream}"
    assert len(upstream) == 4, f"{server.where}: one directory to serve: {upstream}"
    assert upstream[3].startswith("/"), f"{server.where}: an absolute directory"


@pytest.mark.parametrize(
    ("origin", "block"), SNIPPETS, ids=[f"{o}:{b.line}" for o, b in SNIPPETS]
)
def test_every_server_entry_starts_spillvault_mcp(origin: str, block: Block) -> None:
    """Each entry of a snippet starts `spillvault`, and the parser takes its args."""
    if origin == "docs/mcp.md":
        assert block.heading in CLIENTS, f"line {block.line}: under {block.heading}"
    servers = _servers_in(block, origin)
    assert servers, f"{origin}:{block.line}: configures no server"
    for server in servers:
        _check_server(server)


def test_every_spillvault_line_in_the_mcp_doc_parses() -> None:
    """A `spillvault …` command line shown in docs/mcp.md is one the CLI takes."""
    lines = [
        argv
        for block in _blocks(MCP_DOC)
        if block.language == "sh"
        for argv in _command_lines(block.text)
        if argv[0] == "spillvault"
    ]
    assert len(lines) >= 2, "the gc --all-sessions lines"
    for argv in lines:
        args = _parsed(argv[1:])
        assert args.command is not None, argv


def test_a_bad_flag_fails_the_parse_check() -> None:
    """The parse check catches what argparse refuses, rather than exiting."""
    with pytest.raises(AssertionError, match="unrecognized arguments: --limt"):
        _parsed(["mcp", "serve", "--limt", "5000"])
    with pytest.raises(AssertionError, match="--limit"):
        _parsed(["mcp", "proxy", "--limit", "10", "--", "npx"])


def test_the_configuration_shows_every_format() -> None:
    """The Configuration section has json, toml and sh snippets, nothing else."""
    languages = {block.language for block in _configuration_blocks()}
    assert languages == {"json", "toml", "sh"}
