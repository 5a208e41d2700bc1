"""Handlers of `spillvault hook install|uninstall|status|doctor <client>`."""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from spillvault.adapters.hooks import install
from spillvault.adapters.hooks.doctor import client_version, diagnose
from spillvault.adapters.hooks.registry import CLIENT_MODULES, client_named
from spillvault.adapters.storage.session_root import session_root

if TYPE_CHECKING:
    import argparse

    from spillvault.adapters.hooks.client import HookClient, Scope

EXIT_PROBLEM = 1


def _spillvault() -> str:
    """Return this spillvault's absolute path: the one the hooks will call."""
    own = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if own is not None and own.name == "spillvault" and os.access(own, os.X_OK):
        return str(own)
    return str(Path(sys.executable).parent / "spillvault")


def _state_dir() -> Path:
    return Path(session_root()) / "hooks"


def _config(client: HookClient, scope: Scope, project: str | None) -> Path:
    root = Path(project).resolve() if project else Path.cwd()
    return client.config_path(scope, home=Path.home(), project=root)


def _show(change: install.ConfigChange, verb: str) -> str:
    """Describe a change in one line, with the diff it makes."""
    if not change.changes:
        return f"{change.path}: nothing to {verb}"
    before = (change.before or "").splitlines(keepends=True)
    after = (change.after or "").splitlines(keepends=True)
    diff = "".join(
        difflib.unified_diff(before, after, str(change.path), str(change.path))
    )
    gone = " (the file goes)" if change.after is None else ""
    restored = " (restoring the backup byte for byte)" if change.restores_backup else ""
    return f"{change.path}: {verb}{gone}{restored}\n{diff}".rstrip("\n")


def install_command(args: argparse.Namespace) -> int:
    """Add spillvault's hooks to the client's configuration."""
    client = client_named(args.client)
    path = _config(client, args.scope, args.project)
    change = install.plan_install(client, path, _spillvault())
    sys.stdout.write(_show(change, "install") + "\n")
    if not args.dry_run:
        install.apply(change, _state_dir(), installing=True)
        backup = path.with_name(path.name + install.BACKUP_SUFFIX)
        if change.changes and change.before is not None and not change.keeps_backup:
            sys.stdout.write(f"backup: {backup}\n")
        sys.stdout.write(f"check it: spillvault hook doctor {client.name}\n")
    return 0


def uninstall_command(args: argparse.Namespace) -> int:
    """Take spillvault's hooks out of the client's configuration."""
    client = client_named(args.client)
    path = _config(client, args.scope, args.project)
    change = install.plan_uninstall(client, path, _state_dir())
    sys.stdout.write(_show(change, "uninstall") + "\n")
    if not args.dry_run:
        install.apply(change, _state_dir(), installing=False)
    return 0


def status_command(args: argparse.Namespace) -> int:
    """Say, per client and scope, whether the hooks are installed."""
    names = [args.client] if args.client else sorted(CLIENT_MODULES)
    for name in names:
        client = client_named(name)
        for scope in ("user", "project"):
            path = _config(client, scope, args.project)
            try:
                text = path.read_text()
            except OSError:
                text = None
            installed = client.installed(text)
            state = "installed" if installed else "not installed"
            sys.stdout.write(f"{name:<12} {scope:<8} {state:<14} {path}\n")
            if installed:
                for ok, what in client.readiness(path, Path.home()):
                    sys.stdout.write(
                        f"{'':<12} {'':<8} {'ok' if ok else 'NOT READY':<14} {what}\n"
                    )
    return 0


def doctor_command(args: argparse.Namespace) -> int:
    """Run a canary through the installed hook, as the client would."""
    client = client_named(args.client)
    path = _config(client, args.scope, args.project)
    version = client_version(client, os.environ)
    findings = diagnose(
        client,
        config=path,
        spillvault=_spillvault(),
        cwd=str(Path(args.project).resolve() if args.project else Path.cwd()),
        environ=os.environ,
        version=version,
    )
    for finding in findings:
        sys.stdout.write(f"{'ok  ' if finding.ok else 'FAIL'}  {finding.text}\n")
    for note in client.caveats(version):
        sys.stdout.write(f"note  {note}\n")
    return 0 if all(finding.ok for finding in findings) else EXIT_PROBLEM


def run_command(args: argparse.Namespace) -> int:
    """Answer one event (the launcher usually gets here first)."""
    from spillvault.adapters.hooks.entry import main  # noqa: PLC0415 - the hot path's own

    return main(args.client, args.event)


__all__ = [
    "doctor_command",
    "install_command",
    "run_command",
    "status_command",
    "uninstall_command",
]
