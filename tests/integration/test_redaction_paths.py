"""No planted secret reaches the model by any path (issue 20, S1.7 and S3.6).

A secret of each kind goes anywhere in an output over its limit (one under it
is the tool's own text, which the gate leaves alone): in the head, the tail, the
omitted middle (then a key line, it sits on an error line), astride a window
or page boundary. The model's views are the preview (`process` and
`open_stream`), `read_artifact` pages, `grep_artifact` matches with context,
the microcompact placeholder and the MCP tools; none may show the secret or
any 12 characters of it.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spillvault import open_session
from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.harness.microcompact import microcompact
from spillvault.adapters.mcp.artifact_tools import ArtifactTools
from spillvault.domain.enums import SizeUnit
from spillvault.domain.policy import SpillPolicy, ToolLimit
from tests.support.secret_corpus import KINDS, fake_secret

POLICY = SpillPolicy(
    tool_limits={"bash": ToolLimit(3000, SizeUnit.CHARS)},
)
_PIECE = 12
_counter = itertools.count()


def _leaks(secret: str, shown: str) -> list[str]:
    pieces = {secret[i : i + _PIECE] for i in range(max(1, len(secret) - _PIECE + 1))}
    return [piece for piece in pieces if piece in shown]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory):
    opened = open_session(str(tmp_path_factory.mktemp("redact") / "s"), policy=POLICY)
    yield opened
    opened.close()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 10**6),
    lines=st.integers(150, 900),
    where=st.floats(0, 1),
    pad=st.integers(0, 600),
    error_line=st.booleans(),
)
def test_no_planted_secret_reaches_the_model(
    session,
    *,
    kind: str,
    seed: int,
    lines: int,
    where: float,
    pad: int,
    error_line: bool,
) -> None:
    secret, shown = fake_secret(kind, seed)
    filler = [f"step {n} {'x' * (n * 7 % 50)} done" for n in range(lines)]
    at = int(where * lines)
    lead = ("ERROR " if error_line else "") + "y" * pad + " "
    output = "\n".join([*filler[:at], lead + shown, *filler[at:]]) + "\n"
    ext = session.externalizer
    views: list[str] = []
    outcome = ext.process(output, "bash", tool_use_id=f"toolu_{next(_counter)}")
    # An output under its limit is the tool's own text, untouched by the gate.
    assert outcome.reason == "spilled"
    views.append(str(outcome.content))
    stream = ext.open_stream("bash")
    data = output.encode()
    cut = len(data) // 3
    stream.write(data[:cut])
    stream.write(data[cut:])
    views.append(str(stream.close().content))
    handle = outcome.artifact.handle if outcome.artifact else None
    if handle is not None:
        total = ext.line_count(handle)
        for page in (7, 50):
            for start in range(1, total + 1, page):
                args = {"handle": handle, "start_line": start, "limit": page}
                views.append(ext.handle_tool_call("read_artifact", args))
        for pattern, context in ((secret[:6], 0), (secret[-6:], 2), ("step 1", 3)):
            args = {"handle": handle, "pattern": pattern, "context": context}
            views.append(ext.handle_tool_call("grep_artifact", args))
        tools = ArtifactTools(POLICY, scope=session.path)
        try:
            for name, args in (
                ("read_artifact", {"handle": handle, "start_line": max(1, at - 2)}),
                ("grep_artifact", {"handle": handle, "pattern": secret[:6]}),
                ("list_artifacts", {}),
            ):
                views.append(tools.call(name, args).text)
        finally:
            tools.close()
    history = [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": output}
            ],
        },
    ]
    compacted, _report = microcompact(
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}
                ],
            },
            *history,
        ],
        format="anthropic",
        keep_recent=0,
        trigger=0,
        clear_at_least=0,
        externalizer=ext,
    )
    views.append(repr(compacted))
    for view in views:
        assert not _leaks(secret, view), (kind, view[:2000])


def test_redaction_off_shows_the_secret(tmp_path) -> None:
    policy = SpillPolicy(
        tool_limits={"bash": ToolLimit(3000, SizeUnit.CHARS)}, redact_secrets=False
    )
    secret, shown = fake_secret("github-token", 7)
    output = shown + "\n" + "filler line\n" * 2000
    with open_session(str(tmp_path / "s"), policy=policy) as opened:
        outcome = opened.externalizer.process(output, "bash")
        assert secret in str(outcome.content)


def test_the_artifact_keeps_the_exact_bytes(tmp_path) -> None:
    secret, shown = fake_secret("aws-access-key-id", 8)
    output = shown + "\n" + "filler line\n" * 2000
    with open_session(str(tmp_path / "s"), policy=POLICY) as opened:
        ext = opened.externalizer
        outcome = ext.process(output, "bash")
        assert secret not in str(outcome.content)
        handle = outcome.artifact.handle
        assert ext.read_artifact(handle, 0, 1) == shown
        data = ext.read_artifact_bytes(handle, 0, outcome.artifact.size_bytes)
        assert data == output.encode()


def test_the_cli_masks_unless_raw(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    secret, shown = fake_secret("stripe-key", 9)
    output = "filler line\n" * 50 + shown + "\n" + "filler line\n" * 2000
    path = tmp_path / "s"
    with open_session(str(path), policy=POLICY) as opened:
        handle = opened.externalizer.process(output, "bash").artifact.handle
    at = ["--session", str(path)]
    calls = {
        "read": ["read", handle, *at, "--line", "51", "--limit", "1"],
        "bytes": ["read", handle, *at, "--bytes", "590:700"],
        "grep": ["grep", handle, "stripe.api_key", *at, "-C", "1"],
    }
    for name, argv in calls.items():
        assert cli_main(argv) == 0
        masked = capsys.readouterr().out
        assert secret not in masked, name
        assert "[REDACTED " in masked, name
        if name != "bytes":
            assert cli_main([*argv, "--raw"]) == 0
            assert secret in capsys.readouterr().out, name
    # Masked, a grep for the value itself finds nothing; raw, it finds the line.
    guess = ["grep", handle, secret[:10], *at]
    assert cli_main(guess) == 1  # as GNU grep: 1 when nothing matched
    assert capsys.readouterr().out.startswith("no match")
    assert cli_main([*guess, "--raw"]) == 0
    assert secret in capsys.readouterr().out


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_long_output_keeps_its_line_numbers_when_its_ends_are_masked(
    tmp_path, where: str
) -> None:
    secret, shown = fake_secret("jwt", 10)
    body = [f"row {n}" for n in range(40_000)]
    body.insert(20_000, "ERROR middle failure")
    lines = [shown, *body] if where == "head" else [*body, shown]
    output = "\n".join(lines) + "\n"
    with open_session(str(tmp_path / "s"), policy=POLICY) as opened:
        ext = opened.externalizer
        for preview in (
            str(ext.process(output, "bash").content),
            ext.externalize(output, "bash").context_text,
        ):
            assert not _leaks(secret, preview)
            number = 20_001 if where == "tail" else 20_002
            assert f"line {number}: ERROR middle failure" in preview
            assert "[REDACTED jwt #" in preview


def test_a_grep_is_no_oracle_for_a_masked_value(tmp_path) -> None:
    secret, shown = fake_secret("github-token", 11)
    output = "filler line\n" * 500 + shown + "\n" + "filler line\n" * 2000
    with open_session(str(tmp_path / "s"), policy=POLICY) as opened:
        ext = opened.externalizer
        handle = ext.process(output, "bash").artifact.handle
        tools = ArtifactTools(POLICY, scope=opened.path)
        try:
            for call in (ext.handle_tool_call, lambda n, a: tools.call(n, a).text):
                # Guessing the masked value, literally or by regex, finds nothing.
                for args in (
                    {"pattern": secret[:12]},
                    {"pattern": secret[4:9]},
                    {"pattern": "ghp_[A-Za-z0-9]{8}", "regex": True},
                ):
                    found = call("grep_artifact", {"handle": handle, **args})
                    assert found.startswith("no match"), (args, found)
                # What the model sees of the line still matches.
                for args in (
                    {"pattern": "using token"},
                    {"pattern": "^remote: [a-z ]+", "regex": True},
                ):
                    found = call("grep_artifact", {"handle": handle, **args})
                    assert "501: remote: using token [REDACTED github-token #" in found
                    assert not _leaks(secret, found)
        finally:
            tools.close()
