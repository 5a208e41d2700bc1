"""The proxy's relay as a protocol: every request is answered once, whatever happens.

A Hypothesis state machine drives an in-process `McpProxy` in front of a
scripted upstream: calls answered at once, calls held until released,
cancellations, reads of earlier handles, and the upstream crashing. At the
end, every request sent has exactly one response, except a cancelled one,
which has none; nothing answers an id never sent.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from spillvault.adapters.mcp.artifact_tools import ArtifactTools, OwnSession
from spillvault.adapters.mcp.limits import mcp_policy
from spillvault.adapters.mcp.proxy import UPSTREAM_GONE, McpProxy
from spillvault.adapters.mcp.results import META_KEY, ResultGate

from support.mcp_scripted_upstream import lines_of

UPSTREAM = Path(__file__).resolve().parents[1] / "support" / "mcp_scripted_upstream.py"
LIMIT = 6_000
WAIT_SECONDS = 60


class Client:
    """The client's end of the proxy's stdio: send lines, collect responses by id."""

    def __init__(self, session_dir: str) -> None:
        to_proxy_read, self._to_proxy = os.pipe()
        from_proxy, from_proxy_write = os.pipe()
        policy = mcp_policy(LIMIT)
        self.own = OwnSession(session_dir, policy)
        self.tools = ArtifactTools(policy, own=self.own)
        gate = ResultGate(
            policy, lambda: self.own.get().externalizer, lock=self.tools.lock
        )
        self._proxy_in = os.fdopen(to_proxy_read, "rb")
        self._proxy_out = os.fdopen(from_proxy_write, "wb")
        self.proxy = McpProxy(
            [sys.executable, "-P", str(UPSTREAM)],
            tools=self.tools,
            gate=gate,
            client_in=self._proxy_in,
            client_out=self._proxy_out,
        )
        self.responses: dict[Any, list[dict[str, Any]]] = {}
        self._arrived = threading.Condition()
        self._runner = threading.Thread(target=self.proxy.run)
        self._runner.start()
        self._reader = threading.Thread(target=self._read, args=(from_proxy,))
        self._reader.start()
        self._next_id = 0

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as stream:
            for line in stream:
                message = json.loads(line)
                with self._arrived:
                    self.responses.setdefault(message.get("id"), []).append(message)
                    self._arrived.notify_all()

    def send(self, message: dict[str, Any]) -> None:
        """Write one message to the proxy."""
        os.write(self._to_proxy, json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict[str, Any]) -> int:
        """Send a request; return its id."""
        self._next_id += 1
        self.send(
            {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        )
        return self._next_id

    def call(self, name: str, **arguments: Any) -> int:
        """Send a tools/call; return its id."""
        return self.request("tools/call", {"name": name, "arguments": arguments})

    def answer(self, request_id: int) -> dict[str, Any]:
        """Wait for the response to `request_id` and return it."""
        with self._arrived:
            if not self._arrived.wait_for(
                lambda: request_id in self.responses, WAIT_SECONDS
            ):
                msg = f"no response to request {request_id}"
                raise AssertionError(msg)
            return self.responses[request_id][0]

    def close(self) -> None:
        """Close the proxy's stdin, wait for it to finish, and close the sessions."""
        os.close(self._to_proxy)
        self._runner.join(WAIT_SECONDS)
        assert not self._runner.is_alive()
        # The proxy's stdout, as a process's, closes when the proxy is done.
        self._proxy_out.close()
        self._proxy_in.close()
        self._reader.join(WAIT_SECONDS)
        self.tools.close()
        self.own.close()


def _text(response: dict[str, Any]) -> str:
    return "".join(block["text"] for block in response["result"]["content"])


class ProxyProtocol(RuleBasedStateMachine):
    """Calls, holds, cancels, reads and a crash against one proxy."""

    held = Bundle("held")
    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self._root = Path(os.environ["SPILLVAULT_HOME"])
        self._count = getattr(ProxyProtocol, "_runs", 0) + 1
        ProxyProtocol._runs = self._count
        self.client = Client(str(self._root / f"proxy-{self._count}"))
        init = self.client.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        )
        assert "tools" in self.client.answer(init)["result"]["capabilities"]
        self.client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.sent: set[int] = {init}
        self.cancelled: set[int] = set()
        self.crashed = False

    @rule(target=handles, lines=st.sampled_from([1, 40, 2_000]))
    def call_answer(self, lines: int) -> str:
        """A call answered at once: whole when small, a bounded preview when big."""
        request = self.client.call("answer", lines=lines)
        self.sent.add(request)
        response = self.client.answer(request)
        if self.crashed:
            assert response["error"]["code"] == UPSTREAM_GONE
            return ""
        text = _text(response)
        if lines < 100:
            assert text == lines_of(lines)
            return ""
        assert len(text) <= LIMIT
        return response["result"]["_meta"][META_KEY]["content"]

    @rule(target=held)
    def call_hold(self) -> int:
        """A call the upstream answers only when released."""
        request = self.client.call("hold")
        self.sent.add(request)
        return request

    @precondition(lambda self: not self.crashed)
    @rule(request=consumes(held))
    def cancel(self, request: int) -> None:
        """A cancelled call gets no answer; cancelling an answered one is moot."""
        with self.client._arrived:
            answered = request in self.client.responses
        self.client.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": request},
            }
        )
        if not answered:
            self.cancelled.add(request)

    @precondition(lambda self: not self.crashed)
    @rule()
    def release(self) -> None:
        """The upstream answers what it holds, then the release itself."""
        request = self.client.call("release")
        self.sent.add(request)
        assert _text(self.client.answer(request)) == "released"

    @rule(handle=handles)
    def read_back(self, handle: str) -> None:
        """An earlier handle reads back its exact lines, crash or not."""
        if not handle:
            return
        request = self.client.call(
            "read_artifact", handle=handle, start_line=1_999, limit=2
        )
        self.sent.add(request)
        lines = _text(self.client.answer(request)).splitlines()
        assert lines[1:] == ["1999: answer line 1999", "2000: answer line 2000"]

    @precondition(lambda self: not self.crashed)
    @rule()
    def crash(self) -> None:
        """The upstream exits mid-call: the call fails at once, cleanly."""
        request = self.client.call("crash")
        self.sent.add(request)
        error = self.client.answer(request)["error"]
        assert error["code"] == UPSTREAM_GONE
        assert "exited with status 5" in error["message"]
        self.crashed = True

    @invariant()
    def nothing_is_answered_twice_or_unasked(self) -> None:
        """No id has two responses; no response names an id never sent."""
        with self.client._arrived:
            answered = dict(self.client.responses)
        assert set(answered) <= self.sent
        assert all(len(responses) == 1 for responses in answered.values())

    def teardown(self) -> None:
        """Release what is held; then every uncancelled request has one answer."""
        if not self.crashed:
            self.release()
        self.client.close()
        answered = self.client.responses
        assert set(answered) == self.sent - self.cancelled
        assert all(len(responses) == 1 for responses in answered.values())


ProxyProtocol.TestCase.settings = settings(max_examples=25, stateful_step_count=12)
test_proxy_protocol = ProxyProtocol.TestCase
