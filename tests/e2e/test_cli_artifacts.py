"""`spillvault run / read / grep / ls`: what a person or a model sees (S1, S3.5)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.session import open_session

SCRIPT = str(Path(sys.executable).parent / "spillvault")
LOG = (
    'for i in $(seq 1 40000); do if [ $i = 25000 ]; then echo "FATAL: quota at $i"; '
    'else echo "step $i fine"; fi; done; exit 7'
)


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=120,
    )


def expected_log() -> bytes:
    lines = [
        f"FATAL: quota at {i}" if i == 25000 else f"step {i} fine"
        for i in range(1, 40001)
    ]
    return ("\n".join(lines) + "\n").encode()


def test_run_spills_prints_the_preview_and_keeps_the_exit_code(tmp_path: Path) -> None:
    session = tmp_path / "s"
    done = cli("run", "--session", str(session), "--", "bash", "-c", LOG)
    assert done.returncode == 7, done.stderr
    assert done.stdout.startswith("[tool result stored as s/1; tool: bash; sha256: ")
    assert "; source: artifact:s:tool_result_001.txt:" in done.stdout.split("\n")[0]
    assert "line 25000: FATAL: quota at 25000" in done.stdout
    assert len(done.stdout) <= 30000 + 1
    stored = (session / "tool-results" / "tool_result_001.txt").read_bytes()
    assert stored == expected_log()
    assert hashlib.sha256(stored).hexdigest() in done.stdout


def test_run_json_and_small_outputs_pass_through(tmp_path: Path) -> None:
    session = tmp_path / "s"
    done = cli("run", "--session", str(session), "--json", "--", "echo", "hello")
    assert done.returncode == 0
    data = json.loads(done.stdout)
    assert data == {
        "reason": "under_limit",
        "content": "hello\n",
        "artifact": None,
        "exit_code": 0,
        "timed_out": False,
    }
    assert not session.exists()  # nothing to store, so no session (issue 19)


def test_run_stores_non_utf8_output_verbatim(tmp_path: Path) -> None:
    session = tmp_path / "s"
    done = cli(
        "run", "--session", str(session), "--json", "--",
        sys.executable, "-c",
        "import sys; sys.stdout.buffer.write(b'\\xff\\xfe bad bytes\\n' * 20000)",
    )  # fmt: skip
    data = json.loads(done.stdout)
    assert data["reason"] == "spilled"
    stored = (session / "tool-results" / "tool_result_001.txt").read_bytes()
    assert stored == b"\xff\xfe bad bytes\n" * 20000


def test_read_grep_and_ls(tmp_path: Path) -> None:
    session = tmp_path / "s"
    cli("run", "--session", str(session), "--", "bash", "-c", LOG)
    handle = str(session / "tool-results" / "tool_result_001.txt")
    read = cli("read", handle, "--line", "24999", "--limit", "3")
    assert read.returncode == 0, read.stderr
    assert read.stdout == (
        "step 24999 fine\nFATAL: quota at 25000\nstep 25001 fine\n"
        "[more: --line 25002 --limit 3]\n"
    )
    last = cli("read", handle, "--line", "39999", "--limit", "3")
    assert last.stdout == "step 39999 fine\nstep 40000 fine\n"  # the end: no more
    grep = cli("grep", handle, "FATAL", "-C", "1")
    assert grep.stdout.splitlines() == [
        "24999-step 24999 fine",
        "25000:FATAL: quota at 25000",
        "25001-step 25001 fine",
    ]
    first = cli("grep", handle, "step 1", "--max", "2")
    assert (
        first.stdout.splitlines()[-1] == "[stopped at --max 2: continue with --from 11]"
    )
    more = cli("grep", handle, "step 1", "--max", "1", "--from", "11")
    assert more.stdout.splitlines()[0] == "11:step 11 fine"
    page = cli("read", handle, "--bytes", "0:11", "--json")
    assert json.loads(page.stdout) == {
        "bytes_base64": base64.b64encode(b"step 1 fine").decode(),
        "start": 0,
        "requested_start": 0,
        "end": 11,
        "size_bytes": len(expected_log()),
        "next_byte": 11,  # null only at the end of the artifact
    }
    listing = cli("ls", "--session", str(session), "--json")
    (row,) = json.loads(listing.stdout)["artifacts"]
    assert row["filename"] == "tool_result_001.txt"
    assert row["state"] == "sealed"
    assert row["size_bytes"] == len(expected_log())
    assert row["line_count"] == 40000


def test_read_output_is_capped_and_says_how_to_continue(tmp_path: Path) -> None:
    session = tmp_path / "s"
    cli("run", "--session", str(session), "--", "bash", "-c", LOG)
    handle = str(session / "tool-results" / "tool_result_001.txt")
    done = cli("read", handle, "--limit", "40000")
    lines = done.stdout.splitlines()
    footer = re.fullmatch(
        r"\[more: --line (\d+) --limit 40000\] \(cut at the output budget\)", lines[-1]
    )
    assert footer is not None, lines[-1]
    next_line = int(footer[1])
    assert lines[:-1] == [f"step {i} fine" for i in range(1, next_line)]
    assert len(done.stdout.encode()) <= 51200 + 100
    data = json.loads(cli("read", handle, "--limit", "40000", "--json").stdout)
    assert data["next_start_line"] == next_line
    assert data["lines"] == next_line - 1
    assert (data["start_line"], data["total_lines"], data["eof"]) == (1, 40000, False)
    assert data["text"] == "\n".join(lines[:-1])


def test_errors_are_one_clear_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    session = tmp_path / "s"
    cli("run", "--session", str(session), "--", "bash", "-c", LOG)
    outside = cli("read", str(session / "tool-results" / ".." / "session.json"))
    assert outside.returncode == 3
    assert outside.stderr.startswith("spillvault: ArtifactAccessError: ")
    assert len(outside.stderr.splitlines()) == 1
    bad_line = cli(
        "read", str(session / "tool-results" / "tool_result_001.txt"), "--line", "0"
    )
    assert bad_line.returncode == 2  # a usage error, named by argparse
    assert "argument --line: must be a 1-based line number" in bad_line.stderr
    missing = cli("read", str(session / "tool-results" / "tool_result_009.txt"))
    assert missing.returncode != 0
    assert "Traceback" not in missing.stderr
    policy = tmp_path / "bad.toml"
    policy.write_text("[default]\nlimit = -1\nunit = 'bytes'\n")
    bad_policy = cli(
        "run", "--session", str(session), "--policy", str(policy), "--", "true"
    )
    assert bad_policy.returncode == 125  # run's own failure, as for timeout(1)
    assert "SpillPolicyError" in bad_policy.stderr
    assert "limit" in bad_policy.stderr


def test_a_handle_naming_no_session_creates_nothing(tmp_path: Path) -> None:
    done = cli("read", "../../etc/passwd", cwd=tmp_path)
    assert done.returncode == 3
    assert "not an artifact handle: '../../etc/passwd'" in done.stderr
    assert list(tmp_path.iterdir()) == []


def flag_cases(session: Path) -> list[tuple[list[str], str]]:
    handle = str(session / "tool-results" / "tool_result_001.txt")
    at = ["--session", str(session)]
    return [
        (["read", handle, "--line", "0"], "--line"),
        (["read", handle, "--line", "9" * 5000], "--line"),  # past int()'s limit
        (["read", handle, "--line", str(2**63)], "--line"),
        (["read", handle, "--limit", "-1"], "--limit"),
        (["read", handle, "--bytes", "\u00b2:3"], "--bytes"),  # isdigit(), not int()
        (["read", handle, "--bytes", "9" * 5000 + ":1"], "--bytes"),
        (["read", handle, "--bytes", "5:3"], "--bytes"),
        (["grep", handle, "x", "-C", "-1"], "-C"),
        (["grep", handle, "x", "--max", "1e3"], "--max"),
        (["grep", handle, "x", "--from", "0"], "--from"),
        (["gc", *at, "--ttl", "9" * 400], "--ttl"),  # inf seconds: OverflowError
        (["gc", *at, "--ttl", "100000000000000d"], "--ttl"),
        (["gc", *at, "--ttl", "nan"], "--ttl"),
        (["gc", *at, "--ttl", "\u0663h"], "--ttl"),  # an Arabic-Indic three
        (["gc", *at, "--max", "-1"], "--max"),
        (["gc", *at, "--max", "1.5"], "--max"),
        (["reconcile", *at, "--owner", "sqlite:x", "--min-age", "inf"], "--min-age"),
    ]


def test_a_numeric_flag_out_of_range_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    for args, flag in flag_cases(session):
        with pytest.raises(SystemExit) as exited:
            cli_main(args)
        assert exited.value.code == 2, args
        err = capsys.readouterr().err
        assert f"argument {flag}: " in err, (args, err)
        assert len(err.splitlines()[-1]) < 300
    assert not session.exists()


def test_a_handle_with_thousands_of_digits_is_an_access_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    with open_session(session):
        pass
    for digits in (5000, 21):
        handle = str(session / "tool-results" / f"tool_result_{'1' * digits}.txt")
        for args in (["read", handle], ["grep", handle, "x"]):
            assert cli_main(args) == 3
            err = capsys.readouterr().err
            assert err.startswith("spillvault: ArtifactAccessError: not a canonical")
