"""The CLI and `spillvault mcp serve` on a vault shared by hosts (issue 18).

Each host is the installed `spillvault` run with its own `HOME` and
`SPILLVAULT_HOME`; they share only SeaweedFS and PostgreSQL, named by
`--artifacts`/`--event-store` on one host and by the environment on the others.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from spillvault.adapters.storage.s3_client import s3_client

from support.mcp_clients import connected, served, text_of
from support.seaweedfs import S3Server, s3_environment

if TYPE_CHECKING:
    import pytest

SPILLVAULT = Path(sys.executable).parent / "spillvault"
ROWS = 200_000
_buckets = itertools.count(1)


def _hosts_env(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, str], str]:
    for name, value in s3_environment(s3_server).items():
        monkeypatch.setenv(name, value)
    bucket = f"cli-{next(_buckets)}"
    s3_client().create_bucket(Bucket=bucket)
    return s3_environment(s3_server), f"s3://{bucket}/team"


def _run(
    home: Path, env: dict[str, str], *argv: str
) -> subprocess.CompletedProcess[str]:
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [str(SPILLVAULT), *argv],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "SPILLVAULT_HOME": str(home / "sessions"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_a_fleet_runs_reads_lists_verifies_and_collects_through_the_cli(
    s3_server: S3Server,
    postgres_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aws, artifacts = _hosts_env(s3_server, monkeypatch)
    vault = {**aws, "SPILLVAULT_ARTIFACTS": artifacts}
    vault["SPILLVAULT_EVENT_STORE"] = postgres_dsn
    program = f"for i in range({ROWS}): print('row', i)"
    ran = _run(
        tmp_path / "a",
        aws,
        "--artifacts",
        artifacts,
        "--event-store",
        postgres_dsn,
        "run",
        "--session",
        "fleet-cli",
        "--json",
        "--",
        sys.executable,
        "-c",
        program,
    )
    assert ran.returncode == 0, ran.stderr
    outcome = json.loads(ran.stdout)
    handle = outcome["artifact"]["handle"]
    assert handle == "fleet-cli/1"
    assert not (tmp_path / "a" / "sessions" / "fleet-cli").exists()

    listed = _run(tmp_path / "b", vault, "ls")
    assert listed.returncode == 0, listed.stderr
    assert handle in listed.stdout
    page = _run(tmp_path / "b", vault, "read", handle, "--line", "150001")
    assert page.returncode == 0, page.stderr
    assert page.stdout.startswith("row 150000")
    verified = _run(
        tmp_path / "b", vault, "journal", "verify", "--session", "fleet-cli"
    )
    assert verified.returncode == 0, verified.stderr
    assert "journal ok" in verified.stdout

    async def scenario() -> None:
        params = served()
        params.env = {**(params.env or {}), **vault, "HOME": str(tmp_path / "c")}
        params.env["SPILLVAULT_HOME"] = str(tmp_path / "c" / "sessions")
        async with connected(params) as server:
            answer = await server.call_tool(
                "read_artifact", {"handle": handle, "start_line": 7, "limit": 1}
            )
            assert "row 6" in text_of(answer)
            listing = await server.call_tool("list_artifacts", {})
            assert handle in text_of(listing)

    anyio.run(scenario)

    every = _run(tmp_path / "c", vault, "gc", "--all-sessions", "--ttl", "0s", "--json")
    assert every.returncode == 0, every.stderr
    summary = json.loads(every.stdout)
    assert [entry["session"] for entry in summary["sessions"]] == ["fleet-cli"]
    assert summary["totals"]["planned_delete"] == 1
    assert summary["totals"]["deleted"] == 0  # a dry run
    collected = _run(
        tmp_path / "c",
        vault,
        "gc",
        "--session",
        "fleet-cli",
        "--ttl",
        "0s",
        "--apply",
        "--json",
    )
    assert collected.returncode == 0, collected.stderr
    report = json.loads(collected.stdout)["report"]
    assert [d["filename"] for d in report["decisions"]] == ["tool_result_001.txt"]
    assert report["decisions"][0]["status"] == "deleted"
    gone = _run(tmp_path / "b", vault, "read", handle)
    assert gone.returncode == 3
    assert "deleted" in gone.stderr
    assert (
        s3_client().list_objects_v2(Bucket=artifacts.split("/")[2]).get("KeyCount") == 0
    )


def test_a_vault_without_postgresql_is_refused_by_name(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws, artifacts = _hosts_env(s3_server, monkeypatch)
    # `run` opens its session, and so finds the vault wanting, only to store.
    refused = _run(
        tmp_path / "a", aws, "--artifacts", artifacts, "run", "--", "seq", "30000"
    )
    assert refused.returncode == 125
    assert "PostgreSQL event store" in refused.stderr
    bad = _run(tmp_path / "a", aws, "--artifacts", "s3://Bad_Bucket", "ls")
    assert bad.returncode == 3
    assert "not an S3 bucket name" in bad.stderr
