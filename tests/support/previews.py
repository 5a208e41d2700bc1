"""A preview's source facts for a text, as the gate would give them (S1.4)."""

from __future__ import annotations

import hashlib

from spillvault.domain.notice import PreviewSource


def preview_source(text: str, **changes: object) -> PreviewSource:
    """Return the `PreviewSource` of `text` stored as `s-1/1` by tool `bash`."""
    data = text.encode()
    return PreviewSource(
        source_id="artifact:s:tool_result_001.txt:0123456789ab",
        summary="first line",
        tool_name="bash",
        content_sha256=hashlib.sha256(data).hexdigest(),
        handle="s-1/1",
        hint="spillvault read s-1/1",
        total_lines=text.count("\n"),
        total_bytes=len(data),
        **changes,  # type: ignore[arg-type]
    )
