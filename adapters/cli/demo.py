"""`spillvault demo`: a scripted agent loop with a mock model, every step for real.

Seven stages, in a throwaway session (kept with `--keep`): a ~1 MB grep is
spilled; the model pages it back with the read and grep tools; a memory
reference is published through the SQLite owner; a second publication loses
its receipt and the process "crashes", and the reopened session reconciles
it; more large results arrive and microcompact clears the oldest; GC deletes
the unreferenced artifact and keeps the evidence; a summary. GC's planted
orphan and a last stage that removes the event store (the reopen is refused)
damage a copy, so a kept session opens with `ls`, `read` and `journal verify`.
`--json` prints one JSON object per event instead of text.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spillvault.adapters.harness.messages import gate_messages
from spillvault.adapters.harness.microcompact import history_size, microcompact
from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.sqlite_store import STORE_NAME
from spillvault.domain.enums import SizeUnit
from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.machines import ARTIFACT_MACHINE, LEASE_MACHINE
from spillvault.domain.notice import GREP_TOOL, READ_TOOL
from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from spillvault.adapters.services.externalizer import GateOutcome
    from spillvault.adapters.session import ToolResultExternalizer
    from spillvault.domain.values import ArtifactReference

FAILURE_LINE = 11_874  # 1-based, deep in the middle of the demo's grep output
FORMAT = "anthropic"
_KEPT = ARTIFACT_MACHINE.tagged("stored")


@dataclass
class Narrator:
    """Prints a stage's events as short lines, or as JSON objects."""

    out: Callable[[str], object]
    as_json: bool = False
    raw_chars: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)

    def say(self, tag: str, text: str, **data: Any) -> None:
        """Tell one event."""
        if self.as_json:
            self.out(json.dumps({"event": tag, "text": text, **data}) + "\n")
        else:
            self.out(f"[{tag}] {text}\n")


class MockModel:
    """Emits the scripted tool calls of an agent chasing a failing test."""

    def __init__(self) -> None:
        self._next = 0

    def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        """Return an assistant turn with one tool_use block."""
        self._next += 1
        return {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": f"toolu_demo_{self._next:02d}",
                    "name": name,
                    "input": arguments,
                }
            ],
        }


def run_demo(
    parent: str | None,
    *,
    out: Callable[[str], object],
    keep: bool = False,
    as_json: bool = False,
) -> int:
    """Run the stages under `parent` (a new temp dir when None); return 0."""
    narrator = Narrator(out, as_json)
    base = os.path.abspath(tempfile.mkdtemp(prefix="spillvault-demo-", dir=parent))
    session_dir = os.path.join(base, "demo-session")
    try:
        handle = _stages(session_dir, os.path.join(base, "memory.sqlite3"), narrator)
    finally:
        if not keep:
            shutil.rmtree(base)
    if keep:
        _tell_kept(session_dir, handle, narrator)
    return 0


def _stages(session_dir: str, owner_path: str, narrator: Narrator) -> str:
    """Run every stage, the damaging ones on a copy; return the grep's handle."""
    with open_session(session_dir) as session:
        ext = session.externalizer
        model = MockModel()
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Why does test_gc fail?"}
        ]
        artifact = _spill(ext, model, messages, narrator)
        _page_fault(ext, model, messages, artifact, narrator)
        _publish(session_dir, artifact, owner_path, narrator)
    _crash_and_reconcile(session_dir, artifact, owner_path, narrator)
    with open_session(session_dir) as session:
        messages = _microcompact(session.externalizer, model, messages, narrator)
    _on_a_copy(session_dir, narrator)
    with open_session(session_dir) as session:
        _summary(session, messages, narrator)
    return artifact.handle


def _on_a_copy(session_dir: str, narrator: Narrator) -> None:
    """Plant an orphan for GC and remove the store, in a copy of the closed session."""
    scratch = tempfile.mkdtemp(prefix="copy-", dir=os.path.dirname(session_dir))
    try:
        # The same name: it is the session id, which handles and the store carry.
        copy = os.path.join(scratch, os.path.basename(session_dir))
        # copy2 restores each 0600 file and 0700 dir; until then they are wider,
        # but only inside the 0700 scratch dir. Opening the copy checks them again.
        shutil.copytree(session_dir, copy, symlinks=True, copy_function=shutil.copy2)
        narrator.say(
            "copy",
            "GC's planted orphan and the tampering below damage a copy of the "
            "session, removed afterwards; the session itself stays whole",
        )
        with open_session(copy) as session:
            _garbage_collection(session, narrator)
        _refusal(copy, narrator)
    finally:
        shutil.rmtree(scratch)


def _tell_kept(session_dir: str, handle: str, narrator: Narrator) -> None:
    """Say where the kept session is, with commands that open it."""
    # A bare handle is looked for under $SPILLVAULT_HOME; this session is not there.
    where = f"--session {shlex.quote(session_dir)}"
    handle = shlex.quote(handle)
    commands = [
        f"spillvault ls {where}",
        f"spillvault read {handle} {where} --line {FAILURE_LINE - 1} --limit 3",
        f"spillvault grep {handle} AssertionError {where}",
        f"spillvault journal verify {where}",
    ]
    narrator.say(
        "keep",
        f"session kept in {session_dir}; try:"
        + "".join(f"\n  {command}" for command in commands),
        path=session_dir,
        commands=commands,
    )


def _grep_output() -> str:
    """About 1 MB of what `grep -rn` over a big repository prints."""
    lines = [
        f"src/module_{i % 97}/file_{i % 1013}.py:{i % 4000 + 1}: "
        f"value = compute(item_{i}, limit={i % 50})"
        for i in range(16000)
    ]
    lines[FAILURE_LINE - 1] = (
        "tests/test_gc.py:212: AssertionError: artifact deleted while leased"
    )
    return "\n".join(lines) + "\n"


def _result(tool_use_id: str, content: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
        ],
    }


def _run_tool(
    ext: ToolResultExternalizer,
    messages: list[dict[str, Any]],
    turn: dict[str, Any],
    output: str,
    narrator: Narrator,
) -> tuple[list[dict[str, Any]], GateOutcome]:
    """Append the model's turn and the tool's raw output, then gate the history."""
    narrator.raw_chars += len(output)
    tool_use = turn["content"][0]
    messages = [*messages, turn, _result(tool_use["id"], output)]
    gated, outcomes = gate_messages(messages, format=FORMAT, externalizer=ext)
    return gated, outcomes[-1]


def _spill(
    ext: ToolResultExternalizer,
    model: MockModel,
    messages: list[dict[str, Any]],
    narrator: Narrator,
) -> ArtifactReference:
    text = _grep_output()
    turn = model.call("bash", command="grep -rn 'compute(' src/ tests/")
    messages[:], outcome = _run_tool(ext, messages, turn, text, narrator)
    artifact = outcome.artifact
    if artifact is None:  # pragma: no cover - the demo's input is over the limit
        msg = f"the demo's output was not spilled ({outcome.reason})"
        raise RuntimeError(msg)
    shown = str(outcome.content)
    narrator.say(
        "externalize",
        f"grep via bash: {_size(len(text.encode()))} → "
        f"{_size(len(shown.encode()))} in context "
        f"({outcome.reason}; handle {artifact.path.name})",
        raw_bytes=len(text.encode()),
        context_bytes=len(shown.encode()),
    )
    for line in shown.splitlines():
        if line.startswith("line "):
            narrator.say("key line", f"kept in the preview → {line}")
    return artifact


def _page_fault(
    ext: ToolResultExternalizer,
    model: MockModel,
    messages: list[dict[str, Any]],
    artifact: ArtifactReference,
    narrator: Narrator,
) -> None:
    for name, arguments in (
        (
            READ_TOOL,
            {"handle": artifact.handle, "start_line": FAILURE_LINE - 1, "limit": 3},
        ),
        (GREP_TOOL, {"handle": artifact.handle, "pattern": "AssertionError"}),
    ):
        turn = model.call(name, **arguments)
        answer = ext.handle_tool_call(name, arguments)
        messages[:] = [*messages, turn, _result(turn["content"][0]["id"], answer)]
        narrator.raw_chars += len(answer)
        shown = {k: v for k, v in arguments.items() if k != "handle"}
        narrator.say("model", f"calls {name}({shown}), verified:")
        for line in answer.splitlines():
            narrator.say("tool", line)


def _size(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f}MB"
    return f"{count / 1000:.0f}KB"


def _publish(
    session_dir: str, artifact: ArtifactReference, owner_path: str, narrator: Narrator
) -> None:
    memory = artifact.for_memory()
    claim = ArtifactRetentionClaim.from_memory_reference(memory)
    owner = SQLiteOwner(owner_path)
    with open_session(session_dir) as session:
        publisher = owner.publisher(memory, "memory-ref-1")
        session.journal.publish_reference(
            claim, publisher, transaction_id="memory-ref-1"
        )
    narrator.say(
        "lease", "memory-ref-1 prepared → written by the SQLite owner → committed"
    )


def _crash_and_reconcile(
    session_dir: str, artifact: ArtifactReference, owner_path: str, narrator: Narrator
) -> None:
    memory = artifact.for_memory()
    claim = ArtifactRetentionClaim.from_memory_reference(memory)
    owner = SQLiteOwner(owner_path)

    def lost_receipt() -> None:
        owner.publish("memory-ref-2", memory)
        msg = "the owner wrote it, but its reply never came"
        raise TimeoutError(msg)

    with open_session(session_dir) as session:
        try:
            session.journal.publish_reference(
                claim, lost_receipt, transaction_id="memory-ref-2"
            )
        except TimeoutError as error:
            narrator.say("lease", f"memory-ref-2: {error}; the process 'crashes' here")
    with open_session(session_dir) as session:
        journal = session.journal
        recovery = journal.recover()
        narrator.say(
            "reopen",
            f"PREPARED {list(recovery.pending_transaction_ids)} protects "
            f"{artifact.path.name} with no expiry",
        )
        for report in journal.reconcile_pending(owner):
            narrator.say(
                "reconcile",
                f"{report.transaction_id}: {report.status.value} ({report.reason}, "
                f"owner generation {report.observed_generation})",
                **report.to_dict(),
            )
        journal.remove_reference("memory-ref-1", owner.remover("memory-ref-1"))
        narrator.say("lease", "memory-ref-1 deleted by the owner first, then released")
        checked = journal.verify()
        narrator.say("journal", f"{checked.records} chained records match the store")


def _microcompact(
    ext: ToolResultExternalizer,
    model: MockModel,
    messages: list[dict[str, Any]],
    narrator: Narrator,
) -> list[dict[str, Any]]:
    for run in range(3):
        log = "".join(
            f"test_{run}_{n} ... {'FAILED' if n % 97 == 0 else 'ok'}\n"
            for n in range(9000)
        )
        turn = model.call("bash", command=f"pytest -k batch{run}")
        messages, _ = _run_tool(ext, messages, turn, log, narrator)
    compacted, report = microcompact(
        messages,
        format=FORMAT,
        keep_recent=1,
        trigger=100_000,
        clear_at_least=30_000,
        counter=len,  # characters of the history's JSON, as the demo reports
        externalizer=ext,
    )
    narrator.say(
        "microcompact",
        f"context {report.size_before:,} → {report.size_after:,} chars over the "
        f"100,000 trigger: cleared {len(report.cleared)} oldest result(s) "
        f"({', '.join(report.cleared)}); each placeholder names its handle",
        **report.to_dict(),
    )
    return compacted


def _context_chars(messages: list[dict[str, Any]]) -> int:
    return history_size(messages, len)


def _garbage_collection(session: Any, narrator: Narrator) -> None:
    ext = session.externalizer
    orphan = _plant_orphan(ext.tool_results_dir)
    narrator.say(
        "gc",
        f"{orphan}: a 3-day-old file with no event (a crash between link and event)",
    )
    policy = ArtifactCleanupPolicy(dry_run=False)  # the default 24 h orphan TTL
    plan = ext.plan_cleanup_from_journal(session.journal, policy=policy)
    report = ext.apply_cleanup_from_journal(plan, session.journal)
    narrator.say("gc plan", _counts(plan.counts), counts=plan.counts)
    for decision in plan.decisions:
        narrator.say("gc plan", f"{decision.filename}: {decision.status.value} "
                     f"({decision.reason}: {decision.detail})")  # fmt: skip
    narrator.say("gc apply", _counts(report.counts), counts=report.counts)


def _plant_orphan(tool_results: Path) -> str:
    """Leave an artifact-named file with no event, as a crash after `link` would."""
    name = "tool_result_099.txt"
    path = tool_results / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, b"half-recorded output\n" * 100)
    finally:
        os.close(fd)
    three_days_ago = time.time() - 3 * 86400
    os.utime(path, (three_days_ago, three_days_ago))
    return name


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in counts.items()) or "nothing"


def _summary(session: Any, messages: list[dict[str, Any]], narrator: Narrator) -> None:
    policy = session.externalizer.policy
    with_spill = _context_chars(messages)
    without = narrator.raw_chars
    states = session.journal.recover().states
    live = [s for s in states if s.current_phase not in LEASE_MACHINE.terminal_states]
    stored = [a for a in session.externalizer.artifacts() if a.state in _KEPT]
    narrator.say(
        "summary",
        f"context {with_spill:,} chars with spillvault vs {without:,} without "
        f"({with_spill / max(without, 1):.1%}); "
        f"{len(stored)} artifact(s) on disk, "
        f"{len(live)} live lease(s)",
        context_chars=with_spill,
        raw_chars=without,
        context_tokens=policy.measure(json.dumps(messages), SizeUnit.TOKENS),
    )


def _refusal(session_dir: str, narrator: Narrator) -> None:
    os.unlink(os.path.join(session_dir, STORE_NAME))
    narrator.say("tamper", f"removed {STORE_NAME}; reopening…")
    try:
        open_session(session_dir).close()
    except ArtifactLeaseJournalError as error:
        narrator.say("refused", str(error))
    else:  # pragma: no cover - would be a bug, and the demo says so loudly
        narrator.say("BUG", "a session without its store was opened")
