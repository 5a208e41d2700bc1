"""Every code block in README.md and docs/*.md runs, as written (issue 14).

Sybil parses the documents; each fenced block becomes one test here:

- ```python blocks run in one namespace per document, in document order;
- ```sh blocks run under `bash -euo pipefail` and must exit 0;
- ```toml blocks must load as a `SpillPolicy`;
- ```json blocks must parse as JSON (docs/mcp.md's client configurations;
  tests/e2e/test_mcp_docs.py checks what they start);
- `<!-- skip: next "reason" -->` before a block leaves it out (and says why);
- `<!-- invisible-code-block: python -->` comments run without being shown.

A document's blocks share a fresh working directory and run with `PATH`
leading to this interpreter's `spillvault`, and `HOME` inside that
directory (no agent's configuration directory is taken from outside). A block
selected alone (`-k`) first runs the blocks before it in its document, so it
sees what they made.
`anthropic.Anthropic` and `openai.OpenAI` are replaced by scripted clients
that check every request against the SDKs' own types and answer with the
SDKs' own response types, so an agent loop runs to its end offline. Fences
of any other language must be inert (text, mermaid) and are checked for it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from unittest import SkipTest

import anthropic
import openai
import pydantic
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
)
from sybil import Document, Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser
from test_messages import _force
from test_notice_calls import suggested_calls

from spillvault import Session, SpillPolicy, ToolResultExternalizer

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "sh", "toml", "json"}
INERT = {"text", "mermaid"}
MOVED_CONFIG_DIRS = (
    "XDG_CONFIG_HOME",
    "CODEX_HOME",
    "PI_CODING_AGENT_DIR",
    "GEMINI_CLI_HOME",
    "CLAUDE_CONFIG_DIR",
)
SHELL_TIMEOUT = 300  # a hang guard; every block finishes in seconds
FENCE = re.compile(r"^ *```(?P<language>[^\s`]*)", re.MULTILINE)


def _run_shell(example: Example) -> str | None:
    """Run a ```sh block; return a failure text unless it exits 0."""
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SPILLVAULT_SESSION", None)
    # A block may install hooks into an agent's settings: never the real ones.
    env["HOME"] = os.path.join(os.getcwd(), "home")
    for moved in MOVED_CONFIG_DIRS:
        env.pop(moved, None)
    os.makedirs(env["HOME"], exist_ok=True)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example.parsed],
        cwd=os.getcwd(),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SHELL_TIMEOUT,
        check=False,
    )
    if done.returncode == 0:
        return None
    return (
        f"exit status {done.returncode}\n--- stdout (tail)\n{done.stdout[-3000:]}"
        f"\n--- stderr (tail)\n{done.stderr[-3000:]}"
    )


def _load_policy(example: Example) -> None:
    """Check that a ```toml block is a valid spill policy."""
    SpillPolicy.from_toml(str(example.parsed))


def _load_json(example: Example) -> None:
    """Check that a ```json block is JSON."""
    json.loads(str(example.parsed))


SYBIL = Sybil(
    parsers=[
        PythonCodeBlockParser(),
        CodeBlockParser(language="sh", evaluator=_run_shell),
        CodeBlockParser(language="toml", evaluator=_load_policy),
        CodeBlockParser(language="json", evaluator=_load_json),
        SkipParser(),
    ],
)


def _is_block(example: Example) -> bool:
    """A code block (its source is text), not a skip directive (a tuple)."""
    return isinstance(example.parsed, str)


def _parse(path: Path) -> tuple[Document, list[Example]]:
    document = SYBIL.parse(path)
    return document, list(document.examples())


def _cases() -> Iterator[Any]:
    """One case per block, except a block a skip directive names: it cannot run
    here (offline, or from inside the suite), so it is no test at all rather
    than a skipped one."""
    for path in DOCUMENTS:
        after_skip = False
        for index, example in enumerate(_parse(path)[1]):
            if not _is_block(example):
                after_skip = True
                continue
            if not after_skip:
                yield pytest.param(
                    path, index, id=f"{path.relative_to(ROOT)}:{example.line}"
                )
            after_skip = False


CASES = list(_cases())


# the scripted model -------------------------------------------------------------

_ANTHROPIC_REQUEST = pydantic.TypeAdapter(MessageCreateParamsNonStreaming)
_OPENAI_REQUEST = pydantic.TypeAdapter(CompletionCreateParamsNonStreaming)
_HANDLE = re.compile(r"full output: (\S+?);")
_COMMAND = "seq 1 300000"
_NEEDLE = "299999"


class ScriptedModel:
    """Asks for a big `seq`, reads and greps the spilled output, then answers.

    The next move is read from the history, as a model would: no tool result
    yet → bash; the bash result → the `read_artifact(...)` call its notice
    suggests, copied verbatim; the read → grep_artifact on the same handle;
    the grep → a final text, once microcompact has cleared the bash result
    to a placeholder naming that handle. Every history must be JSON (it goes
    over the wire) and answer each tool call in the very next turn.
    """

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.requests = 0
        self.finished = False
        self.handle = ""

    def next_move(self, messages: list[dict[str, Any]], tools: list[Any]) -> Any:
        self.requests += 1
        assert self.requests <= 4, "the loop does not stop"
        json.dumps(messages)  # a request body is JSON
        names = {self._tool_name(tool) for tool in tools}
        assert {"bash", "read_artifact", "grep_artifact"} <= names, names
        results = self._tool_results(messages)
        assert len(results) == self.requests - 1, "a tool result went missing"
        if not results:
            return ("bash", {"command": _COMMAND})
        last = results[-1]
        if len(results) == 1:
            handle = _HANDLE.search(last)
            assert handle, f"the bash result was not spilled: {last[:300]!r}"
            assert len(last) < 40_000, "the spilled preview is not bounded"
            self.handle = handle[1]
            ((tool, arguments),) = [
                call for call in suggested_calls(last) if call[0] == "read_artifact"
            ]
            assert arguments["handle"] == self.handle
            return (tool, arguments)
        if len(results) == 2:
            shown = re.match(r"\[lines (\d+)-(\d+) of 300000\]\n", last)
            assert shown, f"the read did not page: {last[:300]!r}"
            return ("grep_artifact", {"handle": self.handle, "pattern": _NEEDLE})
        found = re.search(rf"^{_NEEDLE}: {_NEEDLE}$", last, re.MULTILINE)
        assert found, f"grep did not find line {_NEEDLE}: {last[:300]!r}"
        cleared = results[0]
        assert cleared.startswith("[tool result cleared"), cleared[:300]
        assert f"full output: {self.handle};" in cleared
        self.finished = True
        return f"Line {_NEEDLE} reads {_NEEDLE}."

    def _tool_name(self, tool: Any) -> str:
        if self.fmt == "anthropic":
            return tool["name"]
        return tool["function"]["name"]

    def _tool_results(self, messages: list[dict[str, Any]]) -> list[str]:
        texts: list[str] = []
        for message in messages:
            if self.fmt == "openai":
                if message["role"] == "tool":
                    texts.append(_text(message["content"]))
                continue
            content = message["content"]
            if message["role"] == "user" and isinstance(content, list):
                texts += [
                    _text(block["content"])
                    for block in content
                    if block["type"] == "tool_result"
                ]
        return texts


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content)


def _check_anthropic_pairs(messages: list[dict[str, Any]]) -> None:
    """Each tool_use is answered by a tool_result in the next (user) message."""
    for index, message in enumerate(messages):
        content = message["content"]
        if message["role"] != "assistant" or isinstance(content, str):
            continue
        asked = {b["id"] for b in content if b["type"] == "tool_use"}
        if not asked:
            continue
        following = messages[index + 1]["content"]
        answered = {b["tool_use_id"] for b in following if b["type"] == "tool_result"}
        assert asked == answered, (asked, answered)


def _check_openai_pairs(messages: list[dict[str, Any]]) -> None:
    """Each tool call is answered by the tool messages right after it."""
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        asked = {call["id"] for call in message["tool_calls"]}
        answered = set()
        for later in messages[index + 1 :]:
            if later["role"] != "tool":
                break
            answered.add(later["tool_call_id"])
        assert asked == answered, (asked, answered)


class _AnthropicMessages:
    def __init__(self, model: ScriptedModel) -> None:
        self._model = model

    def create(self, **request: Any) -> anthropic.types.Message:
        _force(_ANTHROPIC_REQUEST.validate_python(request))
        messages = request["messages"]
        _check_anthropic_pairs(messages)
        move = self._model.next_move(messages, request.get("tools", []))
        number = self._model.requests
        if isinstance(move, str):
            content = [{"type": "text", "text": move}]
            stop = "end_turn"
        else:
            name, arguments = move
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:24]}",
                    "name": name,
                    "input": arguments,
                }
            ]
            stop = "tool_use"
        return anthropic.types.Message.model_validate(
            {
                "id": f"msg_{number:02d}",
                "type": "message",
                "role": "assistant",
                "model": request["model"],
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 20},
            }
        )


class FakeAnthropic:
    """Stands in for `anthropic.Anthropic`: `messages.create` runs the script."""

    instances: ClassVar[list[FakeAnthropic]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.model = ScriptedModel("anthropic")
        self.messages = _AnthropicMessages(self.model)
        FakeAnthropic.instances.append(self)


class _OpenAICompletions:
    def __init__(self, model: ScriptedModel) -> None:
        self._model = model

    def create(self, **request: Any) -> openai.types.chat.ChatCompletion:
        _force(_OPENAI_REQUEST.validate_python(request))
        messages = request["messages"]
        _check_openai_pairs(messages)
        move = self._model.next_move(messages, request.get("tools", []))
        number = self._model.requests
        if isinstance(move, str):
            message: dict[str, Any] = {"role": "assistant", "content": move}
            finish = "stop"
        else:
            name, arguments = move
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{uuid.uuid4().hex[:24]}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
            finish = "tool_calls"
        return openai.types.chat.ChatCompletion.model_validate(
            {
                "id": f"chatcmpl-{number:02d}",
                "object": "chat.completion",
                "created": 0,
                "model": request["model"],
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            }
        )


class _OpenAIChat:
    def __init__(self, model: ScriptedModel) -> None:
        self.completions = _OpenAICompletions(model)


class FakeOpenAI:
    """Stands in for `openai.OpenAI`: `chat.completions.create` runs the script."""

    instances: ClassVar[list[FakeOpenAI]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.model = ScriptedModel("openai")
        self.chat = _OpenAIChat(self.model)
        FakeOpenAI.instances.append(self)


# running a document's blocks in order -------------------------------------------


@dataclass(repr=False)
class _DocumentRun:
    """One document's examples, its namespace and working directory, and progress."""

    path: Path
    examples: list[Example]
    directory: str
    done: int = 0
    failed_at: int | None = None
    results: dict[int, Exception | None] = field(default_factory=dict)

    def run_through(self, index: int) -> None:
        """Run every example up to `index`; raise what `index` raised."""
        __tracebackhide__ = True
        while self.done <= index:
            current = self.done
            self.done += 1
            if self.failed_at is not None:
                line = self.examples[self.failed_at].line
                msg = f"an earlier block (line {line}) failed; this one depends on it"
                self.results[current] = AssertionError(msg)
                continue
            try:
                self.examples[current].evaluate()
            except SkipTest as skipped:
                self.results[current] = skipped
            except Exception as error:  # reported by its own test
                self.results[current] = error
                self.failed_at = current
            else:
                self.results[current] = None
        outcome = self.results[index]
        if isinstance(outcome, SkipTest):
            line = self.examples[index].line
            pytest.skip(f"{self.path.name}, line {line}: {outcome}")
        if outcome is not None:
            raise outcome

    def __repr__(self) -> str:
        return f"<blocks of {self.path.name}: {self.done} run>"

    def close(self) -> None:
        """Close what the blocks left open (sessions, externalizers)."""
        for value in list(self.examples[0].namespace.values()) if self.examples else ():
            if isinstance(value, Session | ToolResultExternalizer):
                value.close()


@pytest.fixture(scope="module")
def document_runs() -> Iterator[dict[Path, _DocumentRun]]:
    runs: dict[Path, _DocumentRun] = {}
    yield runs
    for run in runs.values():
        run.close()


@pytest.mark.parametrize(("path", "index"), CASES)
def test_code_block(
    path: Path,
    index: int,
    document_runs: dict[Path, _DocumentRun],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    run = document_runs.get(path)
    if run is None:
        _, examples = _parse(path)
        directory = tmp_path_factory.mktemp(path.stem.lower())
        run = document_runs[path] = _DocumentRun(path, examples, str(directory))
    monkeypatch.chdir(run.directory)
    monkeypatch.delenv("SPILLVAULT_SESSION", raising=False)
    monkeypatch.setattr(anthropic, "Anthropic", FakeAnthropic)
    monkeypatch.setattr(openai, "OpenAI", FakeOpenAI)
    clients = len(FakeAnthropic.instances), len(FakeOpenAI.instances)
    run.run_through(index)
    # an agent loop that made a client must have reached the final answer
    made = FakeAnthropic.instances[clients[0] :] + FakeOpenAI.instances[clients[1] :]
    assert all(client.model.finished for client in made), "the agent loop stopped early"


def _opening_fences(text: str) -> list[re.Match[str]]:
    """The fences that open a block (fences alternate: open, close, open …)."""
    return list(FENCE.finditer(text))[::2]


def test_every_fence_is_run_or_inert() -> None:
    """A block in another language, or in none, would go unchecked."""
    for path in DOCUMENTS:
        text = path.read_text()
        assert len(FENCE.findall(text)) % 2 == 0, f"{path.name}: a fence is not closed"
        languages = {m["language"] for m in _opening_fences(text)}
        unknown = languages - RUN - INERT
        assert not unknown, f"{path.name}: unchecked code blocks {sorted(unknown)}"


def test_every_runnable_fence_is_collected() -> None:
    for path in DOCUMENTS:
        text = path.read_text()
        opened = [m for m in _opening_fences(text) if m["language"] in RUN]
        _, examples = _parse(path)
        visible = [e for e in examples if _is_block(e) and not _invisible(text, e)]
        assert len(visible) == len(opened), path.name


def _invisible(text: str, example: Example) -> bool:
    return text[example.start : example.start + 4] == "<!--"


# the contract and the diagrams the documents show ------------------------------

CONTRACT = ROOT / "docs" / "contract.md"
CITED = re.compile(r"\b(S[1-8](?:\.\d+){0,2}|J[1-8]|A[1-4])\b")
SOURCES = ("api", "domain", "adapters", "specs", "tests", "bench")


def _defined_rule_ids() -> set[str]:
    text = CONTRACT.read_text()
    bold = set(re.findall(r"\*\*([SJA]\d+(?:\.\d+)*)\*\*", text))
    sections = set(re.findall(r"^## (S\d) ", text, re.MULTILINE))
    return bold | sections


def test_every_rule_id_cited_in_the_code_is_in_the_contract() -> None:
    defined = _defined_rule_ids()
    cited: dict[str, set[str]] = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "node_modules" in path.parts:
                continue  # the npm packages the tests run are not ours
            for rule in CITED.findall(path.read_text()):
                cited.setdefault(rule, set()).add(str(path.relative_to(ROOT)))
    assert len(cited) > 50, "the citation pattern found too little"
    missing = {rule: sorted(paths)[:3] for rule, paths in cited.items()}
    assert {rule: where for rule, where in missing.items() if rule not in defined} == {}


def test_the_state_diagrams_shown_are_the_generated_ones() -> None:
    generated = {
        _diagram(path.read_text()) for path in sorted((ROOT / "specs").glob("*.mmd"))
    }
    shown = [
        _diagram(block)
        for path in DOCUMENTS
        for block in re.findall(r"```mermaid\n(.*?)```", path.read_text(), re.DOTALL)
    ]
    assert shown, "no diagram shown"
    assert [d for d in shown if d not in generated] == []


def _diagram(text: str) -> str:
    """The diagram without its comment lines."""
    return "\n".join(
        line.rstrip() for line in text.strip().splitlines() if not line.startswith("%%")
    )


LINK = re.compile(r"\]\((?!https?://)(?P<target>[^)#\s]*)(?:#(?P<anchor>[^)\s]+))?\)")


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'."""
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    }


def test_every_relative_link_resolves() -> None:
    for path in [*DOCUMENTS, ROOT / "CHANGELOG.md"]:
        for link in LINK.finditer(path.read_text()):
            target = path.parent / link["target"] if link["target"] else path
            assert target.exists(), f"{path.name}: {link[0]}"
            if link["anchor"]:
                anchors = _anchors(target.read_text())
                assert link["anchor"] in anchors, f"{path.name}: {link[0]}"
