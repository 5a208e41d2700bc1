"""`spillvault run` opens its session only to store an output (issue 19).

A hook wraps every shell command in `spillvault run`, so a short output must
leave nothing behind: no session directory, no event store, not even the
sessions root. An output that must be stored is stored whole, what arrived
before it crossed its limit included, as before. Each behaviour is checked on
both ways in: the console script's own `run` parser and the full command line.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.session import open_session

from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Sequence

SCRIPT = str(Path(sys.executable).parent / "spillvault")
FULL = [
    sys.executable,
    "-c",
    "from spillvault.adapters.cli.main import main; raise SystemExit(main())",
]
ENTRIES = {"launcher": [SCRIPT], "full": FULL}
"""The console script (whose launcher parses `run` itself) and the full CLI."""
STORED = "tool-results/tool_result_001.txt"
HEAVY = (
    "eventsourcing",
    "sqlite3",
    "hyperscan",
    "spillvault.adapters.session",
    "spillvault.adapters.cli.commands",
    "spillvault.adapters.cli.main",
    "spillvault.domain.policy",
)
# Text that is not binary, with multi-byte characters, tabs and a CR.
LINE = "línea\tcafé ✓ 日本語 \U0001f600 ok\r\n"


def run(
    entry: str,
    home: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `run ARGS` through `entry` with `home` as $SPILLVAULT_HOME."""
    return subprocess.run(
        [*ENTRIES[entry], "run", *args],
        capture_output=True,
        timeout=HANG_GUARD_SECONDS,
        check=False,
        env={**os.environ, "SPILLVAULT_HOME": str(home), **(env or {})},
    )


def cat(tmp_path: Path, data: bytes) -> list[str]:
    """A command that writes `data`, byte for byte."""
    path = tmp_path / f"output-{hashlib.sha256(data).hexdigest()[:12]}"
    path.write_bytes(data)
    return ["cat", str(path)]


# ------------------------------------------------------- nothing under the root


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize(
    ("size", "flags"),
    [
        (0, []),
        (3_000, []),
        (3_000, ["--json"]),
        (3_000, ["--session", "agent-1"]),
        (25_000, ["--session", "agent-1", "--fail-open"]),  # past SHORT_BYTES
        (25_000, ["--json", "--tool", "read"]),  # an exempt tool
    ],
)
def test_a_short_output_writes_nothing_under_the_sessions_root(
    tmp_path: Path, entry: str, size: int, flags: list[str]
) -> None:
    home = tmp_path / "home"
    output = ("x" * 99 + "\n") * (size // 100)
    done = run(entry, home, *flags, "--", *cat(tmp_path, output.encode()))
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    if "--json" in flags:
        assert json.loads(done.stdout)["content"] == output
    else:
        assert done.stdout.decode() == output
    assert not home.exists()


def test_a_named_session_or_a_policy_file_creates_nothing_either(
    tmp_path: Path,
) -> None:
    session = tmp_path / "s"
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.bash]\nlimit = 3000\nunit = "tokens"\n')
    env = {"SPILLVAULT_SESSION": "from-env"}
    for entry in ENTRIES:
        done = run(entry, tmp_path / "home", "--policy", str(policy), "--", "seq", "9")
        assert (done.returncode, done.stdout) == (0, b"1\n2\n3\n4\n5\n6\n7\n8\n9\n")
        done = run(entry, tmp_path / "home", "--", "seq", "9", env=env)
        assert (done.returncode, done.stdout) == (0, b"1\n2\n3\n4\n5\n6\n7\n8\n9\n")
        done = run(entry, tmp_path / "home", "--session", str(session), "--", "true")
        assert (done.returncode, done.stdout) == (0, b"")
    assert not session.exists()
    assert not (tmp_path / "home").exists()


# ------------------------------------------------------------ stored, and whole


def test_an_output_crossing_its_limit_mid_stream_is_stored_whole(
    tmp_path: Path,
) -> None:
    """The part read before the crossing is kept in memory, then stored first."""
    home = tmp_path / "home"
    go = tmp_path / "go"
    first = (LINE * 200).encode()  # under SHORT_BYTES: kept in memory
    rest = "".join(f"{i}: {LINE}" for i in range(6_000)).encode()
    writer = (
        "import os, sys, time\n"
        f"sys.stdout.buffer.write({first!r}); sys.stdout.flush()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        f"sys.stdout.buffer.write({rest!r})\n"
    )
    script = tmp_path / "writer.py"
    script.write_text(writer)
    wrapper = subprocess.Popen(
        [SCRIPT, "run", "--session", "agent-2", "--tee", "--json", "--",
         sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "SPILLVAULT_HOME": str(home)},
    )  # fmt: skip
    assert wrapper.stderr is not None
    teed = b""
    while len(teed) < len(first):  # the tee copies what spillvault has read
        teed += os.read(wrapper.stderr.fileno(), len(first) - len(teed))
    assert teed == first
    assert not home.exists()  # read, yet under the limit: no session
    go.touch()
    out, _err = wrapper.communicate(timeout=HANG_GUARD_SECONDS)
    assert wrapper.returncode == 0
    view = json.loads(out)
    assert view["reason"] == "spilled"
    stored = (home / "agent-2" / STORED).read_bytes()
    assert stored == first + rest
    assert view["artifact"]["content_sha256"] == hashlib.sha256(stored).hexdigest()
    assert view["artifact"]["size_bytes"] == len(first + rest)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize(
    ("data", "reason"),
    [
        # Over bash's 30,000 characters, under the bytes it streams past.
        (("y" * 79 + "\n") * 500, "spilled"),
        # Streamed as it comes, from the first byte on.
        ("".join(f"{i}: {LINE}" for i in range(8_000)), "spilled"),
        ("a\x00b", "binary"),  # binary is stored whatever its size
    ],
)
def test_an_output_that_must_be_stored_is_stored_byte_for_byte(
    tmp_path: Path, entry: str, data: str, reason: str
) -> None:
    home = tmp_path / "home"
    raw = data.encode()
    done = run(entry, home, "--json", "--session", "s1", "--", *cat(tmp_path, raw))
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["reason"] == reason
    stored = (home / "s1" / STORED).read_bytes()
    assert stored == raw
    assert view["artifact"]["content_sha256"] == hashlib.sha256(raw).hexdigest()


# ------------------------------------------------- the gate's own decision kept


POLICIES = {
    "default": None,
    "tokens": '[tools.bash]\nlimit = 3000\nunit = "tokens"\n',
    "bytes": '[default]\nlimit = 20000\nunit = "bytes"\n',
}


@pytest.mark.parametrize(
    ("tool", "policy", "data"),
    [
        ("bash", "default", b""),
        ("bash", "default", b"x" * 30_000),
        ("bash", "default", b"x" * 30_001),
        ("bash", "default", "é".encode() * 16_000),  # 32,000 bytes, 16,000 chars
        ("bash", "default", b"ok\n" * 1_000 + b"\xff\xfe" + b"ok\n" * 1_000),
        ("other", "default", "€".encode() * 17_000),  # 51,000 bytes
        ("read", "default", b"z" * 40_000),
        ("bash", "tokens", b"word " * 2_000),
        ("bash", "tokens", b"word " * 4_000),
        ("bash", "tokens", b"!" * 2_999),
        ("other", "bytes", b"q" * 16_000),
        ("other", "bytes", "é".encode() * 9_000),  # 18,000 bytes
        ("other", "bytes", "é".encode() * 11_000),  # 22,000 bytes
    ],
)
def test_run_decides_as_the_gate_does(
    tmp_path: Path, tool: str, policy: str, data: bytes
) -> None:
    """What run leaves as it is, and why, is what the session's gate would say."""
    flags = ["--tool", tool]
    toml = POLICIES[policy]
    if toml is not None:
        (tmp_path / "policy.toml").write_text(toml)
        flags += ["--policy", str(tmp_path / "policy.toml")]
    done = run("launcher", tmp_path / "home", "--json", *flags, "--",
               *cat(tmp_path, data))  # fmt: skip
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    policy_object = None
    if toml is not None:
        from spillvault.domain.policy import SpillPolicy  # noqa: PLC0415

        policy_object = SpillPolicy.from_toml(toml)
    with open_session(tmp_path / "reference", policy=policy_object) as session:
        expected = session.externalizer.process(data, tool)
    assert view["reason"] == expected.reason
    assert (view["artifact"] is None) == (expected.artifact is None)
    if expected.artifact is None:
        assert view["content"] == expected.content
        assert not (tmp_path / "home").exists()


# ------------------------------------------------ statuses and streams, as before


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_statuses_and_streams_are_as_before(tmp_path: Path, entry: str) -> None:
    home = tmp_path / "home"
    both = run(
        entry, home, "--", "bash", "-c", "echo out; echo err >&2; echo more; exit 3"
    )
    # stdout and stderr reach stdout merged, in order; spillvault says nothing.
    assert (both.returncode, both.stdout, both.stderr) == (3, b"out\nerr\nmore\n", b"")
    killed = run(entry, home, "--", "bash", "-c", "echo x; kill -TERM $$")
    assert (killed.returncode, killed.stdout) == (143, b"x\n")
    teed = run(entry, home, "--tee", "--", "bash", "-c", "echo out; echo err >&2")
    assert (teed.returncode, teed.stdout, teed.stderr) == (
        0,
        b"out\nerr\n",
        b"out\nerr\n",
    )
    missing = run(entry, home, "--json", "--", "no-such-command-here")
    assert missing.returncode == 127
    assert json.loads(missing.stdout)["error"]["code"] == "command_not_found"
    assert missing.stderr == b"spillvault: no-such-command-here: command not found\n"
    empty = run(entry, home, "--")
    assert empty.returncode == 125
    assert empty.stderr == b"spillvault: run needs a command after --\n"
    assert not home.exists()


def test_a_usage_error_or_help_is_the_full_command_lines(tmp_path: Path) -> None:
    for args in (
        ["--bogus", "--", "true"],
        ["--timeout", "soon", "--", "true"],
        ["-h"],
    ):
        fast = run("launcher", tmp_path / "home", *args)
        full = run("full", tmp_path / "home", *args)
        assert (fast.returncode, fast.stdout, fast.stderr) == (
            full.returncode,
            full.stdout,
            full.stderr,
        )
        assert fast.returncode in {0, 2}


# --------------------------------------------- a session that cannot be opened


@pytest.fixture
def broken_home(tmp_path: Path) -> Path:
    """A sessions root no session can be made under: a regular file."""
    home = tmp_path / "home"
    home.write_text("not a directory\n")
    return home


def test_a_short_output_needs_no_session_so_a_broken_root_is_no_matter(
    tmp_path: Path, broken_home: Path
) -> None:
    for entry in ENTRIES:
        done = run(entry, broken_home, "--session", "s1", "--", "echo", "fine")
        assert (done.returncode, done.stdout, done.stderr) == (0, b"fine\n", b"")


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_failing_open_lets_a_long_output_through_whole(
    tmp_path: Path, broken_home: Path, entry: str
) -> None:
    data = "".join(f"{i}: {LINE}" for i in range(8_000)).encode()
    command = cat(tmp_path, data)
    done = run(entry, broken_home, "--session", "s1", "--fail-open", "--", *command)
    assert done.returncode == 0
    assert done.stdout == data
    assert done.stderr.startswith(b"spillvault: ")
    assert done.stderr.endswith(b"; its output passes as it is\n")
    assert done.stderr.count(b"\n") == 1


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_without_fail_open_a_session_that_cannot_open_is_125(
    tmp_path: Path, broken_home: Path, entry: str
) -> None:
    command = cat(tmp_path, b"w" * 200_000)
    done = run(entry, broken_home, "--json", "--session", "s1", "--", *command)
    assert done.returncode == 125
    assert json.loads(done.stdout)["error"]["exit_status"] == 125
    assert done.stderr.startswith(b"spillvault: ")
    assert done.stderr.count(b"\n") == 1


def test_a_policy_file_that_cannot_load_still_runs_the_command_failing_open(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("default = [\n")
    for entry in ENTRIES:
        done = run(entry, tmp_path / "home", "--policy", str(bad), "--fail-open",
                   "--", "bash", "-c", "echo out; echo err >&2; exit 4")  # fmt: skip
        # Run as it is: its own streams, unmerged, and its own status.
        assert (done.returncode, done.stdout) == (4, b"out\n")
        assert done.stderr.endswith(b"; running the command as it is\nerr\n")


# --------------------------------------------------------- the modules loaded


def imported(tmp_path: Path, command: Sequence[str]) -> list[str]:
    """Run `spillvault run -- COMMAND` as the console script does; name what loaded."""
    probe = (
        "import sys; sys.argv = ['spillvault', 'run', '--', *sys.argv[1:]]; "
        "from spillvault.adapters.cli.launcher import main; status = main(); "
        f"import json; loaded = [m for m in {HEAVY!r} if m in sys.modules]; "
        "print(json.dumps(loaded), file=sys.stderr); "
        "sys.exit(status)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *command],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_SECONDS,
        check=False,
        env={**os.environ, "SPILLVAULT_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stderr.splitlines()[-1])
    return loaded


def test_a_short_output_loads_neither_the_policy_nor_the_event_store(
    tmp_path: Path,
) -> None:
    assert imported(tmp_path, ["true"]) == []
    assert imported(tmp_path, ["seq", "1", "200"]) == []
    # Past SHORT_BYTES the policy decides; the store is still not loaded.
    decided = imported(tmp_path, cat(tmp_path, b"p" * 20_000))
    assert "spillvault.domain.policy" in decided
    assert "eventsourcing" not in decided
    assert "spillvault.adapters.session" not in decided
    assert not (tmp_path / "home").exists()
    # Over the limit: the session, and with it the event store.
    assert {"eventsourcing", "spillvault.adapters.session"} <= set(
        imported(tmp_path, cat(tmp_path, b"q" * 200_000))
    )
