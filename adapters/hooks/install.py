"""Installing into a client's own configuration file, and taking it out again.

The file is parsed by its client module, which refuses one it cannot
parse: nothing is written then. Before a write, the file as it was is kept
beside it (`<name>.spillvault.bak`, 0600: settings can hold secrets), and
the write is atomic (a new file renamed over the old, its mode kept). A
record under the sessions root remembers what was installed; uninstalling a
file nobody changed since restores the backup byte for byte, and one the
user edited since loses only our entries. A symlinked file (a dotfiles
repository) is written through its link.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from spillvault.adapters.hooks.client import hook_command

if TYPE_CHECKING:
    from spillvault.adapters.hooks.client import HookClient

BACKUP_SUFFIX: Final = ".spillvault.bak"
PRIVATE: Final = 0o600


@dataclass(frozen=True)
class ConfigChange:
    """One file's text before and after, and how it gets there."""

    path: Path
    before: str | None
    after: str | None
    restores_backup: bool = False
    keeps_backup: bool = False
    """A reinstall over our own entries: the backup holds the file from before
    the first install, and stays."""

    @property
    def changes(self) -> bool:
        """Tell whether applying this writes anything."""
        return self.before != self.after


def plan_install(client: HookClient, path: Path, spillvault: str) -> ConfigChange:
    """Return the change that puts our entries into `path` (none if they are in)."""
    real = _real(path)
    before = _read(real)
    after = client.install(
        before, hook_command(spillvault, client.name, client.events[0])
    )
    return ConfigChange(real, before, after, keeps_backup=client.installed(before))


def plan_uninstall(client: HookClient, path: Path, state_dir: Path) -> ConfigChange:
    """Return the change that takes our entries out of `path`."""
    real = _real(path)
    before = _read(real)
    if before is None or not client.installed(before):
        return ConfigChange(real, before, before)
    record = _record(state_dir, real)
    if record is not None and record.get("installed_sha256") == _sha256(before):
        backup = _backup_path(real)
        if record.get("existed") is False:
            return ConfigChange(real, before, None, restores_backup=True)
        with contextlib.suppress(OSError):
            return ConfigChange(real, before, backup.read_text(), restores_backup=True)
    return ConfigChange(real, before, client.uninstall(before))


def apply(change: ConfigChange, state_dir: Path, *, installing: bool) -> None:
    """Write the change: backup first, then the file, then the record."""
    if not change.changes:
        return
    path = change.path
    first = not change.keeps_backup and not change.restores_backup
    # A file that goes is wholly ours (a plugin): nothing of the user's to keep.
    if change.before is not None and change.after is not None and first:
        _write_atomically(_backup_path(path), change.before, PRIVATE)
    if change.after is None:
        path.unlink()
    else:
        _write_atomically(path, change.after, _mode(path))
    if change.restores_backup:
        _backup_path(path).unlink(missing_ok=True)
    earlier = _record(state_dir, path) if change.keeps_backup else None
    existed = change.before is not None if earlier is None else earlier.get("existed")
    record = {
        "path": str(path),
        "existed": existed,
        "installed_sha256": _sha256(change.after) if change.after is not None else None,
    }
    if installing:
        _write_record(state_dir, path, record)
    else:
        _record_path(state_dir, path).unlink(missing_ok=True)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def _mode(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return 0o644


def _backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def _record_path(state_dir: Path, path: Path) -> Path:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return state_dir / f"{path.name}-{digest}.json"


def _record(state_dir: Path, path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(_record_path(state_dir, path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("path") == str(path) else None


def _write_record(state_dir: Path, path: Path, record: dict[str, object]) -> None:
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_atomically(_record_path(state_dir, path), json.dumps(record) + "\n", PRIVATE)


def _write_atomically(path: Path, text: str, mode: int) -> None:
    """Write `text` to `path` through a new file renamed over it, fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


__all__ = ["BACKUP_SUFFIX", "ConfigChange", "apply", "plan_install", "plan_uninstall"]
