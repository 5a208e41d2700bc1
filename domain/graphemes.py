"""Where a cut may fall in text: never inside a surrogate pair or a cluster (S1.4)."""

from __future__ import annotations

import unicodedata
from typing import Final

CLUSTER_BACKOFF: Final = 32  # how far a cut may move to leave a combining sequence
_ZWJ: Final = "\u200d"


def _inside_cluster(text: str, index: int) -> bool:
    """Tell whether cutting before text[index] would split what belongs together."""
    if index <= 0 or index >= len(text):
        return False
    before, char = text[index - 1], text[index]
    if "\udc00" <= char <= "\udfff" and "\ud800" <= before <= "\udbff":
        return True
    if before == "\r" and char == "\n":
        return True
    if _ZWJ in (before, char) or "\U0001f3fb" <= char <= "\U0001f3ff":
        return True
    return unicodedata.category(char).startswith("M")


def _splits_pair(text: str, index: int) -> bool:
    """Tell whether a cut before text[index] splits a surrogate pair."""
    return (
        0 < index < len(text)
        and "\ud800" <= text[index - 1] <= "\udbff"
        and "\udc00" <= text[index] <= "\udfff"
    )


def back_off_cluster(text: str, index: int) -> int:
    """Move a cut backwards off a grapheme-like cluster, a little at most."""
    cut = index
    for _ in range(CLUSTER_BACKOFF):
        if not _inside_cluster(text, cut):
            return cut
        cut -= 1
    return index - 1 if _splits_pair(text, index) else index


def forward_off_cluster(text: str, index: int) -> int:
    """Move a cut forwards off a grapheme-like cluster, a little at most."""
    cut = index
    for _ in range(CLUSTER_BACKOFF):
        if not _inside_cluster(text, cut):
            return cut
        cut += 1
    return index + 1 if _splits_pair(text, index) else index


def clip(text: str, limit: int) -> str:
    """Return at most `limit` characters of `text`, never half a surrogate pair."""
    if len(text) <= limit:
        return text
    return text[: back_off_cluster(text, limit)]
