"""The spill proxy: any stdio MCP server behind spillvault's gate.

The proxy relays JSON-RPC messages, not an SDK session, so whatever the two
ends negotiate passes through: every protocol version, capability, request,
notification and server-to-client request (sampling, roots, elicitation),
progress and cancellation. A message the proxy leaves alone is forwarded as
the very bytes it received. It steps in at six places only:

- `initialize` / `server/discover` results gain the `tools` capability if
  the server had none, since the proxy adds tools;
- the first page of `tools/list` gains `read_artifact` and `grep_artifact`
  (an upstream tool of either name is refused with an error: its calls could
  not be told apart), and an `outputSchema` no stub can satisfy is dropped
  (see `structured`);
- `tools/call` of the two added tools is answered here, never forwarded;
- `tools/call`, `tasks/result` and `resources/read` results are gated;
- when the server exits, every request it left unanswered, and every later
  one for it, gets a JSON-RPC error at once; the added tools still answer.

The server's stderr is the proxy's own, so its logs reach the client's log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import json
import logging
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final, Literal

from spillvault.adapters.mcp.artifact_tools import tool_specs
from spillvault.adapters.mcp.catalog import ADDED_TOOLS, ToolCatalog, ToolClashError
from spillvault.adapters.mcp.framing import LineWriter, next_line
from spillvault.adapters.mcp.memory import release_freed_memory

if TYPE_CHECKING:
    from collections.abc import Sequence

    from spillvault.adapters.mcp.artifact_tools import ArtifactTools
    from spillvault.adapters.mcp.results import ResultGate

logger = logging.getLogger(__name__)

UPSTREAM_GONE: Final = -32000
"""The SDKs' code for a closed connection, used when the upstream has exited."""
INTERNAL_ERROR: Final = -32603
METHOD_NOT_FOUND: Final = -32601
STOP_GRACE_SECONDS: Final = 2.0
LISTING_WAIT_SECONDS: Final = 30.0
"""How long a call waits for the proxy's own `tools/list` before going on."""
_GATED: Final = frozenset({"tools/call", "tasks/result", "resources/read"})
_ANNOUNCING: Final = frozenset({"initialize", "server/discover"})
_LIST_CHANGED: Final = "notifications/tools/list_changed"
TRIM_FROM_BYTES: Final = 1 << 20
"""Messages from this size on give their freed memory back to the system."""


class _Relay(enum.Enum):
    """What to send for a message: the very bytes that came."""

    UNCHANGED = enum.auto()


_UNCHANGED: Final = _Relay.UNCHANGED


class UpstreamNotStartedError(OSError):
    """The upstream command could not be started."""


@dataclass(frozen=True)
class _Pending:
    """A client request forwarded upstream and not yet answered."""

    method: str
    tool: str | None = None
    first_page: bool = False
    cancelled: bool = False


@dataclass
class _OwnRequest:
    """A request the proxy itself sent upstream, and its answer once it comes."""

    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    response: dict[str, Any] | None = None


class McpProxy:
    """One client on our stdio, one upstream server on a child's stdio."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        tools: ArtifactTools,
        gate: ResultGate,
        client_in: IO[bytes],
        client_out: IO[bytes],
    ) -> None:
        self.command = list(command)
        self._tools = tools
        self._gate = gate
        self._client_in = client_in
        self._client = LineWriter(client_out)
        self._pending: dict[Any, _Pending] = {}
        self._catalog = ToolCatalog()
        self._own_requests: dict[Any, _OwnRequest] = {}
        self._own_ids = itertools.count(1)
        self._task_tools: dict[Any, str | None] = {}
        self._lock = threading.Lock()
        self._gone: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._upstream: LineWriter | None = None
        self._workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tool")

    def run(self) -> int:
        """Relay until the client closes our stdin; return the exit status."""
        self._start()
        reader = threading.Thread(target=self._relay_upstream, name="upstream")
        reader.start()
        try:
            while (line := next_line(self._client_in)) is not None:
                self._from_client(line)
                if self._client.closed:
                    break
        finally:
            self._stop_upstream()
            reader.join()
            self._workers.shutdown(wait=True)
        return 0

    # start and stop -----------------------------------------------------------

    def _start(self) -> None:
        try:
            self._process = subprocess.Popen(  # noqa: S603 - the user's own server
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,  # the server's log goes where ours goes
            )
        except OSError as error:
            why = error.strerror or str(error)
            msg = f"cannot start the upstream MCP server {self.command[0]!r}: {why}"
            raise UpstreamNotStartedError(msg) from None
        assert self._process.stdin is not None  # noqa: S101 - PIPE given
        self._upstream = LineWriter(self._process.stdin)

    def _stop_upstream(self) -> None:
        """Close the server's stdin, then TERM, then KILL, as the MCP spec says."""
        process = self._process
        if process is None:
            return
        if self._upstream is not None:
            self._upstream.close()
        for signum in (None, signal.SIGTERM, signal.SIGKILL):
            if signum is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_GRACE_SECONDS)
            if process.poll() is not None:
                return

    # client -> upstream -------------------------------------------------------

    def _from_client(self, line: bytes) -> None:
        message = _parsed(line)
        if message is None:
            self._to_upstream(line, None)
            return
        method = message.get("method")
        if not isinstance(method, str):  # a response to the server's request
            self._to_upstream(line, None)
            return
        if "id" not in message:
            # A cancellation of a request answered here is not the server's.
            if method != "notifications/cancelled" or self._forwarded_cancel(message):
                self._to_upstream(line, None)
            return
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        name = params.get("name") if method == "tools/call" else None
        if name in ADDED_TOOLS:
            self._workers.submit(self._answer_locally, message["id"], name, params)
            return
        if isinstance(name, str) and not self._catalog.knows(name):
            # Its result may need a stub that the client's schema accepts.
            self._learn_tools(params.get("_meta"))
        if method == "tasks/result":
            # A task's result is its tool's: gated, and stubbed, as that tool's.
            with self._lock:
                name = self._task_tools.get(_key(params.get("taskId")))
        pending = _Pending(
            method,
            tool=name if isinstance(name, str) else None,
            first_page=method == "tools/list" and not params.get("cursor"),
        )
        self._to_upstream(line, (message["id"], pending))

    def _to_upstream(self, line: bytes, request: tuple[Any, _Pending] | None) -> None:
        """Forward a line; a request the server cannot take gets an error at once."""
        with self._lock:
            gone = self._gone
            if gone is None and request is not None:
                self._pending[_key(request[0])] = request[1]
        if gone is None and self._upstream is not None:
            if not self._upstream.write_line(line):
                # This request was pending too: it is answered with the others.
                self._mark_gone("its stdin was closed")
            return
        if request is None:
            return
        request_id, pending = request
        if pending.method == "tools/list" and pending.first_page:
            # The added tools still work: a client that lists again keeps them.
            result = {"tools": tool_specs(with_list=False)}
            self._client.send({"jsonrpc": "2.0", "id": request_id, "result": result})
        else:
            self._fail(request_id, pending.method, gone)

    def _learn_tools(self, meta: object) -> None:
        """List the upstream's tools ourselves: a client may call before listing.

        The request carries the client's own `_meta`, so it speaks the client's
        protocol era; its answer goes to the catalog, never to the client.
        """
        cursor = None
        while True:
            params: dict[str, Any] = {} if meta is None else {"_meta": meta}
            if cursor is not None:
                params["cursor"] = cursor
            response = self._ask_upstream("tools/list", params)
            result = None if response is None else response.get("result")
            if not isinstance(result, dict):
                return
            try:
                self._catalog.forwarded(result, first_page=False)
            except ToolClashError:
                return  # the client hears of it when it lists
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return

    def _ask_upstream(
        self, method: str, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Send our own request upstream; return its response, None if none came."""
        request_id = f"spillvault-proxy-{next(self._own_ids)}"
        waiting = _OwnRequest()
        with self._lock:
            if self._gone is not None:
                return None
            self._own_requests[_key(request_id)] = waiting
        message = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": params,
        }
        if self._upstream is not None and self._upstream.send(message):
            waiting.done.wait(LISTING_WAIT_SECONDS)
        with self._lock:
            self._own_requests.pop(_key(request_id), None)
        return waiting.response

    def _forwarded_cancel(self, message: dict[str, Any]) -> bool:
        """Tell whether a cancellation names a forwarded request, and mark it.

        A late answer to a cancelled request is dropped, not relayed ungated;
        a request answered here is not the server's to hear about.
        """
        if message.get("method") != "notifications/cancelled":
            return False
        params = message.get("params")
        key = _key(params.get("requestId") if isinstance(params, dict) else None)
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None:
                self._pending[key] = dataclasses.replace(pending, cancelled=True)
        return pending is not None

    def _answer_locally(
        self, request_id: Any, name: str, params: dict[str, Any]
    ) -> None:
        arguments = params.get("arguments")
        answer = self._tools.call(
            name, arguments if isinstance(arguments, dict) else {}
        )
        result = {
            "content": [{"type": "text", "text": answer.text}],
            "isError": answer.is_error,
        }
        self._client.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    # upstream -> client -------------------------------------------------------

    def _relay_upstream(self) -> None:
        process = self._process
        assert process is not None  # noqa: S101 - started before this thread
        assert process.stdout is not None  # noqa: S101 - PIPE given
        try:
            while (line := next_line(process.stdout)) is not None:
                # As text, the bytes go at once: a huge message is held once
                # while it is parsed and gated, not as bytes, text and objects.
                size = len(line)
                text = line.decode("utf-8", "surrogateescape")
                del line
                relayed = self._from_upstream(text)
                del text
                if relayed is not None:
                    self._client.write_line(relayed)
                del relayed
                if size >= TRIM_FROM_BYTES:
                    release_freed_memory()
        finally:
            status = process.wait()
            self._mark_gone(f"it exited with status {status}")

    def _from_upstream(self, text: str) -> bytes | None:
        """Return what the client gets for one upstream line (None: nothing)."""
        message = _parsed(text)
        verdict = _UNCHANGED if message is None else self._verdict(message)
        del message  # a huge original goes before its replacement is written
        if verdict is _UNCHANGED:
            return text.encode("utf-8", "surrogateescape")
        return None if verdict is None else _line_of(verdict)

    def _verdict(
        self, message: dict[str, Any]
    ) -> dict[str, Any] | Literal[_Relay.UNCHANGED] | None:
        """Return the message to send instead, _UNCHANGED, or None to send nothing."""
        if "method" in message or "id" not in message:
            if message.get("method") == _LIST_CHANGED:
                self._catalog.forget()
            return _UNCHANGED
        with self._lock:
            own = self._own_requests.get(_key(message["id"]))
            pending = self._pending.pop(_key(message["id"]), None)
        if own is not None:
            own.response = message
            own.done.set()
            return None
        if pending is None:
            return _UNCHANGED
        if pending.cancelled:
            return None
        changed = self._changed_response(message, pending)
        return _UNCHANGED if changed is None else changed

    def _changed_response(
        self, message: dict[str, Any], pending: _Pending
    ) -> dict[str, Any] | None:
        """Return the response the client gets, or None to forward it as it came."""
        result = message.get("result")
        if not isinstance(result, dict):
            return self._listing_fallback(message, pending)
        changed: dict[str, Any] | None = None
        try:
            if pending.method in _ANNOUNCING:
                changed = _with_tools_capability(result)
            elif pending.method == "tools/list":
                changed = self._catalog.forwarded(result, first_page=pending.first_page)
            elif pending.method in _GATED:
                changed = self._gated(pending, result)
        except ToolClashError as error:
            return _error_response(message["id"], INTERNAL_ERROR, str(error))
        if changed is None:
            return None
        return {**message, "result": changed}

    def _listing_fallback(
        self, message: dict[str, Any], pending: _Pending
    ) -> dict[str, Any] | None:
        """Answer a server without tools: its `tools/list` is only the added tools."""
        error = message.get("error")
        not_found = isinstance(error, dict) and error.get("code") == METHOD_NOT_FOUND
        if pending.method == "tools/list" and pending.first_page and not_found:
            result = {"tools": tool_specs(with_list=False)}
            return {"jsonrpc": "2.0", "id": message["id"], "result": result}
        return None

    def _gated(
        self, pending: _Pending, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        if pending.method == "resources/read":
            return self._gate.resource_result(result)
        task = result.get("task")
        if pending.method == "tools/call" and isinstance(task, dict):
            # A task was made, not a result: remember whose its result will be.
            with self._lock:
                self._task_tools[_key(task.get("taskId"))] = pending.tool
            return None
        tool = pending.tool or "tasks/result"
        return self._gate.tool_result(tool, result, self._catalog.rule_for(tool))

    # the upstream's end -------------------------------------------------------

    def _mark_gone(self, why: str) -> str:
        """Record that the server is gone; fail what it left unanswered."""
        with self._lock:
            if self._gone is None:
                self._gone = (
                    f"the upstream MCP server {self.command[0]!r} is gone: {why}"
                )
            gone = self._gone
            orphans, self._pending = self._pending, {}
            waiting = list(self._own_requests.values())
        for own in waiting:
            own.done.set()
        for request_id, pending in orphans.items():
            if not pending.cancelled:
                self._fail(_unkey(request_id), pending.method, gone)
        return gone

    def _fail(self, request_id: Any, method: str, why: str | None) -> None:
        message = f"{why or 'the upstream MCP server is gone'} (request {method})"
        self._client.send(_error_response(request_id, UPSTREAM_GONE, message))


def _parsed(line: bytes | str) -> dict[str, Any] | None:
    """Return the JSON-RPC object on a line, or None for anything else (batches too)."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _line_of(message: dict[str, Any]) -> bytes:
    """Return a message the proxy changed as one line.

    ASCII escapes keep it valid UTF-8 even where the server's JSON held a
    lone surrogate; the message is small, so the escapes cost little.
    """
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def _key(request_id: Any) -> tuple[str, Any]:
    """Key a request id by type as well: 1 and "1" are different ids."""
    return (type(request_id).__name__, request_id)


def _unkey(key: tuple[str, Any]) -> Any:
    return key[1]


def _with_tools_capability(result: dict[str, Any]) -> dict[str, Any] | None:
    capabilities = result.get("capabilities")
    if not isinstance(capabilities, dict) or "tools" in capabilities:
        return None
    return {**result, "capabilities": {**capabilities, "tools": {}}}


def _error_response(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": message},
    }


__all__ = ["ADDED_TOOLS", "McpProxy", "UpstreamNotStartedError"]
