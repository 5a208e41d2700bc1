"""Handles of one session's artifacts, issued and checked alike by every backend.

A handle is `<session-id>/<number>` (S1.5); the artifact's source id is an
alias (S2.3). Both are parsed here, for the local and the object store, so a
hostile handle is refused the same way whatever holds the bytes (S3.2). What
a path means is the backend's own (`_parse_path`).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from spillvault.domain.errors import ArtifactAccessError
from spillvault.domain.handles import MAX_ARTIFACT_NUMBER, handle_of, parse_handle
from spillvault.domain.values import (
    ArtifactReference,
    ArtifactSource,
    artifact_filename,
    artifact_number,
    parse_artifact_source_id,
)

if TYPE_CHECKING:
    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.domain.artifact import Artifact


class SessionArtifactNames:
    """What every artifact store of one session does with names and handles."""

    _session: SessionHandles

    def handle_for(self, filename: str) -> str:
        """Return the handle of an artifact: `<session-id>/<number>`."""
        return handle_of(self._session.session_id, filename)

    def longest_handle(self) -> str:
        """Return a handle at least as long as any this store will issue."""
        return self.handle_for(artifact_filename(MAX_ARTIFACT_NUMBER))

    def hint(self, handle: str) -> str:
        """Return the shell command that reads the artifact (the backend's hint)."""
        self._parse(handle)
        return f"spillvault read {shlex.quote(handle)}"

    def _reference(self, artifact: Artifact, path: Path | None) -> ArtifactReference:
        """Return the S4.1 reference of a stored (not open) artifact."""
        content = artifact.stored_content
        source_id = artifact.source_id(self._session.session_id)
        if content is None or source_id is None or artifact.summary is None:
            msg = f"{artifact.filename} is still open: no digest to reference yet"
            raise ValueError(msg)
        handle = self.handle_for(artifact.filename)
        return ArtifactReference(
            path=Path(handle) if path is None else path,
            handle=handle,
            summary=artifact.summary,
            source_tool=artifact.source_tool,
            source=ArtifactSource(
                source_id=source_id,
                title=f"{artifact.source_tool} output ({artifact.filename})",
                captured_at=artifact.created_at,
            ),
            size_bytes=content.size_bytes,
            content_sha256=content.content_sha256,
        )

    def _parse(self, handle: object) -> str:
        """Return the filename a handle, source id or path of this session names."""
        if not isinstance(handle, str):
            msg = f"artifact handle must be a string, not {type(handle).__name__}"
            raise ArtifactAccessError(msg)
        if "\x00" in handle:
            msg = "artifact handle contains a NUL byte"
            raise ArtifactAccessError(msg)
        if handle.startswith("artifact:"):
            return self._parse_source_id(handle)
        if handle.startswith("/"):
            return self._parse_path(handle)
        parsed = parse_handle(handle)
        if parsed is None:
            msg = (
                f"not an artifact handle: {handle[:300]!r} "
                "(a handle is <session-id>/<number>, e.g. as the notice shows it)"
            )
            raise ArtifactAccessError(msg)
        self._check_session(parsed.session_id, handle)
        return parsed.filename

    def _parse_name(self, handle_or_filename: object) -> str:
        """Return the filename a handle or a bare canonical filename names."""
        if isinstance(handle_or_filename, str) and "/" in handle_or_filename:
            return self._parse(handle_or_filename)
        if isinstance(handle_or_filename, str) and "\x00" in handle_or_filename:
            msg = "artifact name contains a NUL byte"
            raise ArtifactAccessError(msg)
        if (
            not isinstance(handle_or_filename, str)
            or artifact_number(handle_or_filename) is None
        ):
            msg = f"not a canonical artifact name: {handle_or_filename!r:.300}"
            raise ArtifactAccessError(msg)
        return handle_or_filename

    def _parse_path(self, handle: str) -> str:
        """Return the filename an absolute path names (the backend decides)."""
        raise NotImplementedError

    def _check_session(self, session_id: str, handle: str) -> None:
        if session_id != self._session.session_id:
            msg = (
                f"artifact handle {handle[:300]!r} belongs to session "
                f"{session_id[:100]!r}, not {self._session.session_id!r}"
            )
            raise ArtifactAccessError(msg)

    def _parse_source_id(self, handle: str) -> str:
        try:
            source = parse_artifact_source_id(handle)
        except ValueError as error:
            raise ArtifactAccessError(str(error)) from None
        self._check_session(source.session_id, handle)
        artifact = self._session.store.get_artifact(source.filename)
        content = None if artifact is None else artifact.stored_content
        if content is not None and not source.matches_digest(content.content_sha256):
            msg = f"source id {handle[:300]!r} names other content than the artifact"
            raise ArtifactAccessError(msg)
        return source.filename


__all__ = ["SessionArtifactNames"]
