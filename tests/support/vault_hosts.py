"""One "host" of a shared vault, run as a process of its own by test_vault_hosts.

    PYTHONPATH=tests python -m support.vault_hosts ROLE SESSION WORKDIR COUNT

Every host reaches the vault only through its environment
(`SPILLVAULT_ARTIFACTS`, `SPILLVAULT_EVENT_STORE`, the AWS variables) and keeps
its local state in its own `SPILLVAULT_HOME`. When the test can make one, a
host runs in a network namespace of its own and reaches the servers only
through the links `support.netns` opens; it writes its namespace to
`ROLE.netns`. WORKDIR is the test's orchestration only: A appends each
acknowledged lease to `acked.jsonl`, B each reference it removed to
`removed.jsonl`, and each host writes `ROLE.done`.

- spiller (A): COUNT times, spill an output and publish a lease on it into
  the PostgreSQL owner; a publication refused because GC took the artifact
  first is fine (not acknowledged).
- reader (B): for each acknowledged lease, read and grep the artifact by
  handle (it must be exactly what A wrote); remove every other reference.
- collector (C): plan and apply GC, with a clock a day ahead so every
  unprotected artifact is a candidate, while A and B work and once more
  after both are done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

from spillvault.adapters.owners.postgres_owner import PostgresOwner
from spillvault.adapters.session import open_session, vault_from_environment
from spillvault.domain.errors import ArtifactMissingError
from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

from support.netns import network_namespace, start_links_from_environment

OWNER_SCHEMA = "vault_hosts_owner"
POLL = 0.05
POLLS = 6000  # 5 minutes of polling at most: a count, not a deadline guess


def body(number: int) -> str:
    """Return output `number`: big enough to spill, and greppable by its number."""
    return "".join(f"{number}: row {row}\n" for row in range(6000)) + (
        f"FAILED item {number}\n"
    )


def _lines(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _append(path: Path, entry: dict[str, str]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(entry) + "\n")
        out.flush()
        os.fsync(out.fileno())


def spiller(session_id: str, work: Path, count: int) -> None:
    """Spill and publish `count` times."""
    owner = PostgresOwner(os.environ["SPILLVAULT_EVENT_STORE"], schema=OWNER_SCHEMA)
    with open_session(session_id, **vault_from_environment()) as session:
        for number in range(count):
            artifact = session.externalizer.process(body(number), "bash").artifact
            assert artifact is not None  # a spill always stores
            memory = artifact.for_memory()
            claim = ArtifactRetentionClaim.from_memory_reference(memory)
            tx = f"lease-{number}"
            try:
                session.journal.publish_reference(
                    claim, lambda tx=tx, memory=memory: owner.publish(tx, memory),
                    transaction_id=tx,
                )  # fmt: skip
            except ArtifactMissingError:
                continue  # GC came first: nothing acknowledged
            _append(work / "acked.jsonl", {"tx": tx, "handle": artifact.handle})


def reader(session_id: str, work: Path, count: int) -> None:
    """Read every acknowledged artifact by handle; remove every other reference."""
    del count
    owner = PostgresOwner(os.environ["SPILLVAULT_EVENT_STORE"], schema=OWNER_SCHEMA)
    done: set[str] = set()
    for _ in range(POLLS):
        finished = (work / "spiller.done").exists()
        pending = [e for e in _lines(work / "acked.jsonl") if e["tx"] not in done]
        if finished and not pending:
            return
        if not pending:
            time.sleep(POLL)
            continue
        with open_session(session_id, mode="open", **vault_from_environment()) as s:
            for entry in pending:
                number = int(entry["tx"].removeprefix("lease-"))
                want = body(number).encode()
                got = s.externalizer.read_artifact_bytes(entry["handle"], 0, len(want))
                page = s.externalizer.read_artifact(entry["handle"], 6000, 1)
                if got != want or page != f"FAILED item {number}":
                    msg = f"{entry['handle']} does not read back as written"
                    raise AssertionError(msg)
                hits = s.externalizer.grep_artifact(entry["handle"], "FAILED item")
                if [m.line_number for m in hits.matches] != [6001]:
                    msg = f"grep of {entry['handle']} found {hits.matches}"
                    raise AssertionError(msg)
                if number % 2:
                    tx = entry["tx"]
                    s.journal.remove_reference(tx, lambda tx=tx: owner.remove(tx))
                    _append(work / "removed.jsonl", {"tx": tx})
                done.add(entry["tx"])
    msg = "reader: the spiller never finished"
    raise AssertionError(msg)


def collector(session_id: str, work: Path, count: int) -> None:
    """Run GC apply while the others work, then once more after they are done."""
    del count
    policy = ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False)
    last = False
    for runs in range(POLLS):
        if last:
            (work / "collector.runs").write_text(str(runs))
            return
        last = all((work / f"{r}.done").exists() for r in ("spiller", "reader"))
        with open_session(session_id, mode="open", **vault_from_environment()) as s:
            later = s.clock.now() + timedelta(days=1)
            ext = s.externalizer
            plan = ext.plan_cleanup_from_journal(s.journal, policy=policy, now=later)
            report = ext.apply_cleanup_from_journal(plan, s.journal, now=later)
            for decision in report.decisions:
                if decision.status.value == "deleted":
                    _append(work / "deleted.jsonl", {"name": decision.filename})
    msg = "collector: the others never finished"
    raise AssertionError(msg)


ROLES = {"spiller": spiller, "reader": reader, "collector": collector}


def main() -> None:
    """Run one role, then say so in WORKDIR."""
    role, session_id, work, count = sys.argv[1:5]
    links = start_links_from_environment()
    (Path(work) / f"{role}.netns").write_text(network_namespace())
    if role != "spiller":
        # Wait for the session to exist: A creates it.
        for _ in range(POLLS):
            if (Path(work) / "acked.jsonl").exists() or (
                Path(work) / "spiller.done"
            ).exists():
                break
            time.sleep(POLL)
    ROLES[role](session_id, Path(work), int(count))
    (Path(work) / f"{role}.done").touch()
    for link in links:
        link.close()


if __name__ == "__main__":
    main()
