"""Handlers of `spillvault mcp serve` and `spillvault mcp proxy`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from spillvault.adapters.cli.sessions import session_to_create
from spillvault.adapters.storage.session_root import session_dir_for

if TYPE_CHECKING:
    import argparse

EXTRA_HINT = "install the MCP extra: pip install 'spillvault[mcp]'"


def _missing_extra(error: ImportError) -> int:
    sys.stderr.write(
        f"spillvault: {error.name or 'mcp'} is not installed; {EXTRA_HINT}\n"
    )
    return 4


def serve_command(args: argparse.Namespace) -> int:
    """Serve read_artifact, grep_artifact and list_artifacts over stdio."""
    try:
        from spillvault.adapters.mcp.serve import serve_stdio  # noqa: PLC0415 - the optional extra
    except ImportError as error:
        return _missing_extra(error)
    from spillvault.adapters.mcp.artifact_tools import ArtifactTools  # noqa: PLC0415
    from spillvault.adapters.mcp.limits import mcp_policy  # noqa: PLC0415

    # Only --session narrows it: a client's $SPILLVAULT_SESSION is no choice.
    scope = session_dir_for(args.session) if args.session else None
    tools = ArtifactTools(mcp_policy(args.limit), scope=scope)
    try:
        serve_stdio(tools, version=args.package_version)
    finally:
        tools.close()
    return 0


def proxy_command(args: argparse.Namespace) -> int:
    """Run CMD as the upstream MCP server, gating its results; serve it on stdio."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        msg = "mcp proxy needs the upstream server's command after --"
        raise ValueError(msg)
    try:
        from spillvault.adapters.mcp.proxy import McpProxy  # noqa: PLC0415 - the optional extra
    except ImportError as error:
        return _missing_extra(error)
    from spillvault.adapters.mcp.artifact_tools import ArtifactTools, OwnSession  # noqa: PLC0415
    from spillvault.adapters.mcp.limits import mcp_policy  # noqa: PLC0415
    from spillvault.adapters.mcp.results import ResultGate  # noqa: PLC0415

    policy = mcp_policy(args.limit)
    own = OwnSession(session_to_create(args), policy)
    tools = ArtifactTools(policy, own=own)
    gate = ResultGate(policy, lambda: own.get().externalizer, lock=tools.lock)
    proxy = McpProxy(
        command,
        tools=tools,
        gate=gate,
        client_in=sys.stdin.buffer,
        client_out=sys.stdout.buffer,
    )
    try:
        return proxy.run()
    finally:
        with tools.lock:
            tools.close()
            own.close()


__all__ = ["proxy_command", "serve_command"]
