"""`spillvault run`'s handler: the output gated, its session opened only to store it.

A coding agent's hook puts `spillvault run` in front of every shell command, so
a short output must cost next to nothing (issue 19). Nothing is opened, created
or written under the sessions root until the output must be stored: over the
tool's limit, binary, or cut short by a signal or the timeout. Until then it is
kept in memory; once it must be stored, the session is opened and the output
goes to it whole, what arrived before included, gated as `SessionExternalizer`
gates it. The policy is not even loaded for an output of at most SHORT_BYTES
unless a --policy file is named, so a short output loads neither the policy nor
the event store.

With --fail-open, spillvault never costs the agent its command: a policy file
that cannot be loaded runs the command as it is, and a session that cannot be
opened when the output must be stored lets the output through as it is.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, Any, Final, Self

from spillvault.adapters.cli.output import emit
from spillvault.adapters.cli.run import (
    EXIT_NOT_EXECUTABLE,
    EXIT_NOT_FOUND,
    EXIT_OWN_FAILURE,
    CommandNotStartedError,
    CommandRun,
)
from spillvault.domain.binary import is_binary

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from spillvault.adapters.services.externalizer import GateOutcome
    from spillvault.adapters.session import Session, ToolResultExternalizer
    from spillvault.domain.policy import SpillPolicy

SHORT_BYTES: Final = 16 * 1024
"""An output of at most this many bytes is under every limit of the default
policy (30,000 characters for bash, 51,200 bytes for any other tool): a byte
decodes to at most one character, or to the three UTF-8 bytes of U+FFFD."""


def run_command(args: argparse.Namespace) -> int:
    """Run a command, gate its merged output, print what the model would see."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        msg = "run needs a command after --"
        raise ValueError(msg)
    gate = _OutputGate(args)
    try:
        gate.load_policy_file()
    except Exception as error:
        if not args.fail_open:
            raise
        # A hook's rewrite must never cost the agent its command.
        _say_failed_open(error, "running the command as it is")
        return _run_unwrapped(command)
    tee = sys.stderr.buffer if _tee_wanted(args) else None
    with gate, CommandRun(command, timeout=args.timeout, tee=tee) as run:
        view = gate.view(run)
    if view is not None:
        content = view if isinstance(view, str) else str(view.content)
        emit(args, content, _view_data(run, view, gate) if args.json else {})
    return run.exit_status


class _OutputGate:
    """Gates one command's output, loading the policy and the session on demand."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._tool: str = args.tool
        # Up to this many bytes an output is under its limit, the policy unread.
        self._known_short = 0 if args.policy else SHORT_BYTES
        self._policy: SpillPolicy | None = None
        self._session: Session | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._session is not None:
            self._session.close()

    def load_policy_file(self) -> None:
        """Load the --policy file, if one is named: a bad one fails before the run."""
        if self._args.policy:
            self._loaded_policy()

    def view(self, run: CommandRun) -> GateOutcome | str | None:
        """Gate the output: its text if left as it is, else the gate's outcome.

        None when it was let through unstored (--fail-open). The output ends
        when the command's pipe closes; the command is waited for only then,
        and before the gate, so the header can say how it ended.
        """
        chunks = run.chunks()
        buffered = bytearray()
        for data in chunks:
            buffered += data
            if self._streams(len(buffered)):
                return self._streamed(run, buffered, chunks)
        run.wait()
        if not run.interrupted:
            text = self._as_is(bytes(buffered))
            if text is not None:
                return text
        ext = self._externalizer_or_let_through(buffered, chunks)
        if ext is None:
            return None
        if not run.interrupted:
            # Short yet over the limit in its unit, or binary: gated whole.
            return ext.process(bytes(buffered), self._tool, command=run.facts())
        stream = ext.open_stream(self._tool)
        stream.write(bytes(buffered))
        return stream.close(interrupted=True, command=run.facts())

    def reason_as_is(self) -> str:
        """Say why the gate left an output as it is: exempt tool, or under the limit."""
        return (
            "exempt_tool"
            if self._loaded_policy().is_exempt(self._tool)
            else "under_limit"
        )

    def _streamed(
        self, run: CommandRun, buffered: bytearray, chunks: Iterator[bytes]
    ) -> GateOutcome | None:
        """Stream a long output to the session as it comes, what came before first."""
        ext = self._externalizer_or_let_through(buffered, chunks)
        if ext is None:
            run.wait()
            return None
        # To disk as it comes, readable by its handle while the command runs.
        stream = ext.open_stream(self._tool)
        stream.write(bytes(buffered))
        for more in chunks:
            stream.write(more)
        run.wait()
        return stream.close(interrupted=run.interrupted, command=run.facts())

    def _streams(self, size: int) -> bool:
        """Tell whether an output of `size` bytes so far goes to the session now."""
        if size <= self._known_short:
            return False
        limit = self._loaded_policy().limit_for(self._tool)
        return size > limit.limit * (1 if limit.unit == "bytes" else 4)

    def _as_is(self, data: bytes) -> str | None:
        """Return the text the gate leaves as it is (S1.2), else None."""
        if is_binary(data):
            return None  # stored whatever its size
        text = data.decode("utf-8", "replace")
        if len(data) <= self._known_short:
            return text
        policy = self._loaded_policy()
        limit = policy.limit_for(self._tool)
        if (
            policy.is_exempt(self._tool)
            or policy.measure(text, limit.unit) <= limit.limit
        ):
            return text
        return None

    def _loaded_policy(self) -> SpillPolicy:
        if self._policy is None:
            from spillvault.adapters.cli.policy_file import load_policy_file  # noqa: PLC0415 - only a long output needs the policy
            from spillvault.adapters.storage import hyperscan_cache  # noqa: PLC0415
            from spillvault.domain.policy import SpillPolicy  # noqa: PLC0415

            hyperscan_cache.install()  # its databases, before any is built

            path = self._args.policy
            self._policy = load_policy_file(path) if path else SpillPolicy()
        return self._policy

    def _externalizer_or_let_through(
        self, buffered: bytearray, chunks: Iterator[bytes]
    ) -> ToolResultExternalizer | None:
        """Open the session; failing open, write the output through and return None."""
        try:
            return self._externalizer()
        except Exception as error:
            if not self._args.fail_open:
                raise
            _say_failed_open(error, "its output passes as it is")
            out = sys.stdout.buffer
            out.write(buffered)
            for more in chunks:
                out.write(more)
            out.flush()
            return None

    def _externalizer(self) -> ToolResultExternalizer:
        if self._session is None:
            from spillvault.adapters.cli.sessions import session_to_create  # noqa: PLC0415 - only a stored output needs the session
            from spillvault.adapters.session import (  # noqa: PLC0415
                open_session,
                vault_from_environment,
            )

            self._session = open_session(
                session_to_create(self._args),
                policy=self._policy,
                **vault_from_environment(),
            )
        return self._session.externalizer


def _view_data(
    run: CommandRun, view: GateOutcome | str, gate: _OutputGate
) -> dict[str, Any]:
    """Return the --json object: the gate's decision, the view and how the run ended."""
    data: dict[str, Any]
    if isinstance(view, str):
        data = {"reason": gate.reason_as_is(), "content": view, "artifact": None}
    else:
        data = _outcome_dict(view)
        if data["artifact"] is not None:
            data["artifact"]["command"] = run.facts().to_payload()
    data["exit_code"] = run.exit_status
    if run.signalled is not None:
        data["signal"] = signal.Signals(run.signalled).name
    data["timed_out"] = run.timed_out
    return data


def _outcome_dict(outcome: GateOutcome) -> dict[str, Any]:
    artifact = outcome.artifact
    return {
        "reason": outcome.reason,
        "content": outcome.content,
        "artifact": None
        if artifact is None
        else {
            "handle": artifact.handle,
            "source_id": artifact.source.source_id,
            "content_sha256": artifact.content_sha256,
            "size_bytes": artifact.size_bytes,
            "summary": artifact.summary,
        },
    }


def _say_failed_open(error: Exception, what: str) -> None:
    sys.stderr.write(f"spillvault: {error}; {what}\n")


def _run_unwrapped(command: list[str]) -> int:
    """Become the command: its output and exit status are the caller's, untouched."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)  # noqa: S606 - the user's own command
    except FileNotFoundError:
        raise CommandNotStartedError(
            command[0], EXIT_NOT_FOUND, "command not found"
        ) from None
    except OSError as error:
        why = (error.strerror or str(error)).lower()
        raise CommandNotStartedError(command[0], EXIT_NOT_EXECUTABLE, why) from None
    return EXIT_OWN_FAILURE  # pragma: no cover - execvp returns only by raising


def _tee_wanted(args: argparse.Namespace) -> bool:
    """Copy output to stderr live: --tee, --no-tee, else when stdout is a terminal."""
    if args.tee is not None:
        return bool(args.tee)
    return sys.stdout.isatty()


__all__ = ["SHORT_BYTES", "run_command"]
