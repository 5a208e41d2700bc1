"""`spillvault run` as a Unix wrapper (issue 15 §2): groups, signals, exit statuses."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spillvault.adapters.cli.run import CommandRun, signal_name
from spillvault.domain.command import CommandFacts

from support.tiers import HANG_GUARD_SECONDS

SCRIPT = str(Path(sys.executable).parent / "spillvault")
# A tree: the shell and two background jobs, each writing its pid. The jobs
# ignore SIGINT, as POSIX has it for a non-interactive shell.
TREE = "echo $$ > pids; sleep 60 & echo $! >> pids; sleep 60 & echo $! >> pids; wait"
# The same tree with SIGINT back at its default in the jobs: every process ends
# on the signal itself, so how the shell ends does not race the grace kill.
ENDED_BY_ANY_SIGNAL = TREE.replace("sleep", "env --default-signal=INT sleep")


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, "run", "--session", str(tmp_path / "s"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=HANG_GUARD_SECONDS,
        check=False,
    )


def artifacts(tmp_path: Path) -> list[dict[str, object]]:
    listed = subprocess.run(
        [SCRIPT, "ls", "--session", str(tmp_path / "s"), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG_GUARD_SECONDS,
    )
    found: list[dict[str, object]] = json.loads(listed.stdout)["artifacts"]
    return found


def alive(pid: int) -> bool:
    """Tell whether `pid` runs (a zombie waiting for its reaper is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_for(condition: object, what: str) -> None:
    """Poll a state (not a time) until it holds; the guard only stops a hang."""
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


def test_the_commands_own_status_passes_through(tmp_path: Path) -> None:
    done = run(tmp_path, "--", "bash", "-c", "echo out; exit 3")
    assert (done.returncode, done.stdout) == (3, "out\n")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_command_killed_by_a_signal_exits_128_plus_its_number(
    tmp_path: Path, signum: int
) -> None:
    done = run(tmp_path, "--", "bash", "-c", f"kill -{signum} $$")
    assert done.returncode == 128 + signum


def test_a_missing_command_is_127_and_one_line(tmp_path: Path) -> None:
    done = run(tmp_path, "--", "no-such-command-here")
    assert done.returncode == 127
    assert done.stderr == "spillvault: no-such-command-here: command not found\n"


def test_a_file_that_cannot_be_executed_is_126(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("echo hi\n")
    script.chmod(0o644)
    done = run(tmp_path, "--", str(script))
    assert done.returncode == 126
    assert done.stderr.count("\n") == 1


def test_spillvaults_own_failure_is_125(tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("default = [\n")
    done = run(tmp_path, "--policy", str(bad), "--", "true")
    assert done.returncode == 125
    assert done.stderr.startswith("spillvault: ")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "status", "code"),
    [
        (["--", "no-such-command-here"], 127, "command_not_found"),
        (["--policy", "missing.toml", "--", "true"], 125, None),
    ],
)
def test_with_json_stdout_is_one_object_errors_included(
    tmp_path: Path, argv: list[str], status: int, code: str | None
) -> None:
    done = run(tmp_path, "--json", *argv)
    assert done.returncode == status
    error = json.loads(done.stdout)["error"]
    assert error["exit_status"] == status
    assert error["message"]
    if code is not None:
        assert error["code"] == code


def test_a_timeout_kills_the_group_keeps_a_partial_artifact_and_exits_124(
    tmp_path: Path,
) -> None:
    done = run(
        tmp_path, "--timeout", "1", "--json", "--", "bash", "-c", "echo begun; " + TREE
    )
    assert done.returncode == 124
    assert json.loads(done.stdout)["timed_out"] is True
    assert [a["state"] for a in artifacts(tmp_path)] == ["partial"]
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    wait_for(lambda: not any(map(alive, pids)), "the timed-out tree to be gone")


def test_tee_copies_output_to_stderr_as_it_arrives(tmp_path: Path) -> None:
    go = tmp_path / "go"
    child = subprocess.Popen(
        [SCRIPT, "run", "--session", str(tmp_path / "s"), "--tee", "--", "bash", "-c",
         f"echo ready; while [ ! -e {go} ]; do sleep 0.01; done; echo done"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert child.stderr is not None
    # The first line reaches stderr while the command still waits for `go`.
    assert child.stderr.readline() == "ready\n"
    go.touch()
    out, err = child.communicate(timeout=HANG_GUARD_SECONDS)
    assert (child.returncode, out, err) == (0, "ready\ndone\n", "done\n")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_spillvault_ends_the_whole_tree(
    tmp_path: Path, signum: int
) -> None:
    wrapper, pids = started_tree(tmp_path, ENDED_BY_ANY_SIGNAL)
    os.kill(wrapper.pid, signum)
    out, err = wrapper.communicate(timeout=HANG_GUARD_SECONDS)
    assert wrapper.returncode == 128 + signum
    assert "Traceback" not in err
    view = json.loads(out)
    assert view["signal"] == signal.Signals(signum).name
    wait_for(lambda: not any(map(alive, pids)), "every process of the tree to end")
    assert [a["state"] for a in artifacts(tmp_path)] == ["partial"]


def test_a_tree_that_ignores_the_signal_is_killed_after_the_grace_period(
    tmp_path: Path,
) -> None:
    # The shell becomes a job too: what spillvault started ends by SIGKILL alone.
    ignoring = "trap '' INT; " + TREE.replace("; wait", "; exec sleep 60")
    wrapper, pids = started_tree(tmp_path, ignoring)
    os.kill(wrapper.pid, signal.SIGINT)
    out, err = wrapper.communicate(timeout=HANG_GUARD_SECONDS)
    assert wrapper.returncode == 128 + signal.SIGKILL
    assert "Traceback" not in err
    view = json.loads(out)
    # spillvault passed SIGINT on; SIGKILL is what ended the command.
    assert (view["signal"], view["artifact"]["command"]["signal"]) == (
        "SIGINT",
        "SIGKILL",
    )
    wait_for(lambda: not any(map(alive, pids)), "every process of the tree to end")
    assert [a["state"] for a in artifacts(tmp_path)] == ["partial"]


def started_tree(tmp_path: Path, tree: str) -> tuple[subprocess.Popen[str], list[int]]:
    """Start `spillvault run` of a tree; return it once every process runs."""
    pid_file = tmp_path / "pids"
    wrapper = subprocess.Popen(
        [SCRIPT, "run", "--session", str(tmp_path / "s"), "--json", "--",
         "bash", "-c", "echo begun; " + tree],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    wait_for(
        lambda: pid_file.exists() and len(pid_file.read_text().split()) == 3,
        "the tree to write its pids",
    )
    pids = [int(p) for p in pid_file.read_text().split()]
    # A job's pid is written when it is forked: until it runs `sleep`, a
    # signal may find it a shell ignoring SIGINT (or `env` not yet done).
    wait_for(
        lambda: all(_command(pid) == "sleep" for pid in pids[1:]),
        "the jobs to run sleep",
    )
    assert all(map(alive, pids))
    return wrapper, pids


def _command(pid: int) -> str:
    """Return the name a process runs under ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


# ---------------------------------------------------------------- what happened

LONG = "seq 1 30000"  # more than bash's limit: stored, so the view has a header
DURATION = r"duration: \d+\.\ds\]"


def command_line(view: str) -> str:
    """Return the header's command line, checking the header around it."""
    first, summary, command, _ = view.split("\n", 3)
    assert first.startswith("[tool result stored as s/")
    assert summary.startswith("[summary: ")
    return command


def test_the_header_and_ls_say_what_ran_and_how_it_ended(tmp_path: Path) -> None:
    done = run(tmp_path, "--json", "--", "bash", "-c", f"{LONG}; exit 3")
    assert done.returncode == 3
    view = json.loads(done.stdout)
    assert re.fullmatch(
        rf"\[command: bash -c '{LONG}; exit 3'; exit: 3; {DURATION}",
        command_line(view["content"]),
    )
    facts = view["artifact"]["command"]
    assert isinstance(facts.pop("duration_ms"), int)
    assert facts == {
        "argv": ["bash", "-c", f"{LONG}; exit 3"],
        "exit_status": 3,
        "signal": None,
        "timed_out": False,
    }
    [row] = artifacts(tmp_path)
    assert (row["command"], row["exit_status"]) == (facts["argv"], 3)
    assert isinstance(row["duration_ms"], int)
    assert row["duration_ms"] >= 0


def test_a_command_killed_by_sigterm_shows_143_and_the_signal(tmp_path: Path) -> None:
    done = run(tmp_path, "--", "bash", "-c", f"{LONG}; kill -TERM $$")
    assert done.returncode == 143
    line = command_line(done.stdout)
    assert re.fullmatch(rf"\[command: .*; exit: 143 \(SIGTERM\); {DURATION}", line)
    [row] = artifacts(tmp_path)
    assert (row["exit_status"], row["signal"], row["timed_out"]) == (
        143,
        "SIGTERM",
        False,
    )


def test_a_timed_out_command_shows_124_and_says_so(tmp_path: Path) -> None:
    done = run(tmp_path, "--timeout", "1", "--", "sleep", "30")
    assert done.returncode == 124
    assert "partial: the stored output is incomplete" in done.stdout
    line = command_line(done.stdout)
    assert re.fullmatch(
        rf"\[command: sleep 30; exit: 124 \(timed out\); {DURATION}", line
    )
    [row] = artifacts(tmp_path)
    assert (row["exit_status"], row["timed_out"], row["state"]) == (
        124,
        True,
        "partial",
    )


def test_control_characters_in_arguments_stay_escaped_on_one_line(
    tmp_path: Path,
) -> None:
    done = run(tmp_path, "--", "bash", "-c", LONG, "a\nb\x1b[31m\u2028c")
    assert done.returncode == 0
    line = command_line(done.stdout)
    assert line.startswith(
        f"[command: bash -c '{LONG}' 'a\\x0ab\\x1b[31m\\u2028c'; exit: 0; "
    )
    assert "\x1b" not in line
    assert "\u2028" not in line


def test_a_huge_command_line_is_clipped_in_the_header(tmp_path: Path) -> None:
    done = run(tmp_path, "--", "bash", "-c", LONG, "x" * 5_000)
    assert done.returncode == 0
    line = command_line(done.stdout)
    shown = line.removeprefix("[command: ").split("; exit: ")[0]
    assert shown == f"bash -c '{LONG}' " + "x" * (200 - 25) + "..."
    [row] = artifacts(tmp_path)
    assert row["command"] == ["bash", "-c", LONG, "x" * 5_000]  # in full


def test_the_duration_is_measured_on_the_given_clock() -> None:
    ticks = iter([100.0, 112.4567])
    with CommandRun(["true"], clock=lambda: next(ticks)) as command:
        assert list(command.chunks()) == []
        assert command.wait() == 0
    assert command.facts() == CommandFacts(("true",), 0, 12_457)


def test_undecodable_arguments_and_unnamed_signals_still_have_names() -> None:
    with CommandRun(["true", os.fsdecode(b"\xff")]) as command:
        assert list(command.chunks()) == []
        command.wait()
    assert command.facts().argv == ("true", "\\xff")
    assert signal_name(signal.SIGTERM) == "SIGTERM"
    assert signal_name(signal.SIGRTMIN + 6) == "SIGRTMIN+6"
