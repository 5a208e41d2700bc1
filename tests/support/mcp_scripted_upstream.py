"""A scripted stdio MCP server for the proxy's protocol tests; stdlib only.

`answer` replies at once with `lines` numbered lines; `hold` replies only
when `release` is called (a cancelled hold never); `crash` exits at once.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS = [
    {"name": name, "inputSchema": {"type": "object"}}
    for name in ("answer", "hold", "release", "crash")
]


def lines_of(count: int) -> str:
    """Return `count` numbered lines."""
    return "".join(f"answer line {n}\n" for n in range(1, count + 1))


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _result(request_id: Any, result: dict[str, Any]) -> None:
    _send({"jsonrpc": "2.0", "id": request_id, "result": result})


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def main() -> None:
    """Serve until stdin closes."""
    held: list[Any] = []
    for line in sys.stdin:
        message = json.loads(line)
        method, params = message.get("method"), message.get("params") or {}
        if method == "notifications/cancelled":
            held = [i for i in held if i != params.get("requestId")]
        if "id" not in message:
            continue
        request_id = message["id"]
        if method == "initialize":
            info = {"name": "scripted", "version": "1"}
            _result(
                request_id,
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": info,
                },
            )
        elif method == "tools/list":
            _result(request_id, {"tools": TOOLS})
        elif method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if name == "answer":
                _result(request_id, _text(lines_of(int(arguments.get("lines", 1)))))
            elif name == "hold":
                held.append(request_id)
            elif name == "release":
                for waiting in held:
                    _result(waiting, _text(f"released {waiting}"))
                held = []
                _result(request_id, _text("released"))
            elif name == "crash":
                sys.exit(5)
        else:
            _send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": -32601, "message": method},
                }
            )


if __name__ == "__main__":
    main()
