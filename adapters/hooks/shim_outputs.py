"""What the plugin-file clients (OpenCode, pi) share: reading outputs they cut.

Both cut a long tool output before their after-hook sees it and keep the
whole in a file; both pass content blocks. These read the whole back, safely,
and decide what the model sees instead.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Final

from spillvault.adapters.hooks.client import STORED

if TYPE_CHECKING:
    from collections.abc import Callable

"""How a spillvault preview begins: one is never stored again."""
RESTORED_MAX_CHARS: Final = 40_000
"""A spillvault preview the client cut is shown whole up to this length
(`spillvault run` prints at most 30,000 characters)."""
FULL_OUTPUT_MAX_BYTES: Final = 128 * 1024 * 1024
"""The most of a full-output file read back; past it, the client's cut stays."""


def text_of(blocks: object) -> str | None:
    """Return the text blocks' text joined; None unless `blocks` are content blocks."""
    if not isinstance(blocks, list) or not all(
        isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks
    ):
        return None
    texts = [b.get("text") for b in blocks if b["type"] == "text"]
    if not all(isinstance(text, str) for text in texts):
        return None
    return "\n".join(str(text) for text in texts)


def full_output(path: object) -> str | None:
    """Return the text of a full-output file, if it is a regular file small enough."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > FULL_OUTPUT_MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(FULL_OUTPUT_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > FULL_OUTPUT_MAX_BYTES:
        return None
    return data.decode("utf-8", errors="replace")


def shown_instead(
    text: str, full: str | None, gate: Callable[[str], str | None]
) -> str | None:
    """Return what the model should see instead of `text`; None: `text` as is.

    `full` is the whole output the client cut to `text`, when it could be
    read. A spillvault preview (a wrapped command's, or an MCP proxy's) is
    never stored again: a cut one is shown whole instead.
    """
    if full is not None and full != text:
        if full.startswith(STORED):
            return full if len(full) <= RESTORED_MAX_CHARS else None
        return gate(full)
    if text.startswith(STORED):
        return None
    return gate(text)


__all__ = [
    "FULL_OUTPUT_MAX_BYTES",
    "RESTORED_MAX_CHARS",
    "STORED",
    "full_output",
    "shown_instead",
    "text_of",
]
