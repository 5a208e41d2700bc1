"""The package installs as `spillvault.*`; a bare `domain` is never importable."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import spillvault

REPO = Path(__file__).resolve().parents[2]
CHECK_UNPACKED = (
    "import spillvault, spillvault.domain.machines as m; "
    "print(spillvault.__file__); print(m.LEASE_MACHINE.spec.name)"
)


def run_python(code: str, cwd: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *flags, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_packages_import_from_a_neutral_directory(tmp_path: Path) -> None:
    done = run_python(
        "import spillvault, spillvault.domain, spillvault.adapters, spillvault.specs\n"
        "print(spillvault.__version__)",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == spillvault.__version__


def test_bare_domain_is_not_importable_from_a_neutral_directory(tmp_path: Path) -> None:
    for name in ("domain", "adapters", "specs", "api"):
        done = run_python(f"import {name}", tmp_path)
        assert done.returncode != 0
        assert f"No module named '{name}'" in done.stderr


def test_bare_domain_is_not_importable_from_the_repo_root_with_safe_path() -> None:
    done = run_python("import domain", REPO, "-P")
    assert done.returncode != 0
    assert "No module named 'domain'" in done.stderr


def test_the_test_run_cannot_import_bare_domain() -> None:
    assert importlib.util.find_spec("domain") is None
    assert "domain" not in sys.modules


def test_typed_and_data_files_ship_with_the_packages() -> None:
    for package in ("spillvault", "spillvault.domain", "spillvault.adapters"):
        spec = importlib.util.find_spec(package)
        assert spec is not None
        assert spec.origin is not None
        assert (Path(spec.origin).parent / "py.typed").is_file()
    specs = Path(importlib.util.find_spec("spillvault.specs").origin).parent
    assert {p.name for p in specs.glob("*.toml")} == {
        "lease.toml",
        "artifact.toml",
        "secrets.toml",
    }
    assert {p.name for p in specs.glob("*.mmd")} == {"lease.mmd", "artifact.mmd"}


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "spillvault"
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"spillvault {spillvault.__version__}"


def test_public_names_of_spec_are_exported() -> None:
    wanted = {
        "BASH_MAX_OUTPUT_LENGTH", "TOOL_RESULT_THRESHOLD_KB", "HEAD_BYTES",
        "TAIL_BYTES",
        "DEFAULT_ORPHAN_TTL_SECONDS", "RETENTION_JOURNAL_NAME", "SpillPolicyError",
        "ArtifactAccessError", "ArtifactIntegrityError", "ArtifactRetentionError",
        "ArtifactLeaseJournalError", "ArtifactPublicationRejected",
        "ArtifactOwnerGenerationChanged", "ArtifactCleanupStatus", "ArtifactLeasePhase",
        "ArtifactReferencePresence", "ArtifactReconciliationStatus", "ArtifactSource",
        "ArtifactReference", "ArtifactMemoryReference", "ArtifactRetentionClaim",
        "ArtifactCleanupPolicy", "ArtifactLeaseTransaction", "ArtifactLeaseState",
        "ArtifactLeaseRecovery", "ArtifactReferenceObservation",
        "ArtifactReconciliationReport", "parse_artifact_source_id",
        "ArtifactReferenceOwner", "open_session",
    }  # fmt: skip
    assert wanted <= set(spillvault.__all__)
    assert all(hasattr(spillvault, name) for name in spillvault.__all__)
    assert spillvault.BASH_MAX_OUTPUT_LENGTH == 30000
    assert spillvault.TOOL_RESULT_THRESHOLD_KB == 50
    assert (spillvault.HEAD_BYTES, spillvault.TAIL_BYTES) == (6144, 24576)
    assert spillvault.DEFAULT_ORPHAN_TTL_SECONDS == 86400
    assert spillvault.RETENTION_JOURNAL_NAME == "retention-leases.jsonl"


def test_wheel_holds_only_the_mapped_packages_and_works(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
         str(tmp_path / "dist"), str(REPO)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("spillvault-*.whl")
    import zipfile  # noqa: PLC0415

    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"spillvault", wheel.name.split("-py3")[0] + ".dist-info"}
    for wanted in (
        "spillvault/__init__.py",
        "spillvault/py.typed",
        "spillvault/domain/lease.py",
        "spillvault/adapters/session.py",
        "spillvault/specs/lease.toml",
        "spillvault/specs/secrets.toml",
        "spillvault/specs/artifact.mmd",
    ):
        assert wanted in names
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    done = subprocess.run(
        [sys.executable, "-c", CHECK_UNPACKED],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(unpacked)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        str(unpacked / "spillvault/__init__.py"),
        "Lease",
    ]
