"""The pure parts of the survival score: peer cuts, needle matching, positions.

Each peer policy is re-expressed from its published rule (sizes in KB are
KiB, 1,024 bytes; cuts by bytes land on UTF-8 character boundaries; no peer's
truncation notice is added, so a peer's size is only the output it keeps):

- Claude Code: the first 2,000 characters;
- Gemini CLI: over 40,000 characters, the first 20% and last 80% of 40,000;
- Codex: over 10 KB, the first 5 KB and the last 5 KB;
- OpenCode: the head, up to 2,000 lines or 50 KB, whichever comes first;
- pi: the tail, up to 2,000 lines or 50 KB, whichever comes first;
- DeepSeek Harness: over 50 KB, the first 25 KB and the last 25 KB.

A needle is kept when its text (whitespace-trimmed, at most its first 200
characters) appears in the preview once ANSI escapes and, for ours, the
"line N: " prefix of key lines are removed. Its position is by the byte
offset of its line: start below 10% of the output's bytes, end at 90% or
beyond, middle between.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

KB: Final = 1024
MATCH_CHARS: Final = 200
START_SHARE: Final = 0.10
END_SHARE: Final = 0.90
ANSI: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
KEY_LINE_PREFIX: Final = re.compile(r"^line \d+: ", re.MULTILINE)

Cut = Callable[[str], str]


def head_bytes(text: str, size: int) -> str:
    """The longest prefix of `text` within `size` UTF-8 bytes (whole characters)."""
    return text.encode("utf-8")[:size].decode("utf-8", "ignore")


def tail_bytes(text: str, size: int) -> str:
    """The longest suffix of `text` within `size` UTF-8 bytes (whole characters)."""
    if size <= 0:
        return ""
    return text.encode("utf-8")[-size:].decode("utf-8", "ignore")


def byte_size(text: str) -> int:
    """UTF-8 size."""
    return len(text.encode("utf-8"))


def claude_code(text: str) -> str:
    """Claude Code: the first 2,000 characters."""
    return text[:2000]


def gemini_cli(text: str) -> str:
    """Gemini CLI: over 40,000 chars, keep the first 8,000 and the last 32,000."""
    if len(text) <= 40_000:
        return text
    return text[:8_000] + text[-32_000:]


def codex(text: str) -> str:
    """Codex: over 10 KB, keep the first 5 KB and the last 5 KB."""
    if byte_size(text) <= 10 * KB:
        return text
    return head_bytes(text, 5 * KB) + tail_bytes(text, 5 * KB)


def _lines_within(lines: list[str], max_lines: int, max_bytes: int) -> list[str]:
    """Whole lines from the front while both the line and byte caps hold."""
    kept, used = [], 0
    for line in lines[:max_lines]:
        cost = byte_size(line) + 1
        if used + cost > max_bytes:
            break
        kept.append(line)
        used += cost
    return kept


def opencode(text: str) -> str:
    """OpenCode: the head, up to 2,000 lines or 50 KB, whichever comes first."""
    return "\n".join(_lines_within(text.split("\n"), 2000, 50 * KB))


def pi(text: str) -> str:
    """Pi: the tail, up to 2,000 lines or 50 KB, whichever comes first."""
    lines = text.split("\n")
    lines.reverse()
    kept = _lines_within(lines, 2000, 50 * KB)
    kept.reverse()
    return "\n".join(kept)


def deepseek(text: str) -> str:
    """DeepSeek Harness: over 50 KB, keep the first 25 KB and the last 25 KB."""
    if byte_size(text) <= 50 * KB:
        return text
    return head_bytes(text, 25 * KB) + tail_bytes(text, 25 * KB)


PEERS: Final[dict[str, Cut]] = {
    "Claude Code (head 2,000 chars)": claude_code,
    "Gemini CLI (20/80 of 40,000 chars)": gemini_cli,
    "Codex (5 KB + 5 KB)": codex,
    "OpenCode (head 2,000 lines/50 KB)": opencode,
    "pi (tail 2,000 lines/50 KB)": pi,
    "DeepSeek Harness (25 KB + 25 KB)": deepseek,
}


def searchable(preview: str, *, ours: bool) -> str:
    """The preview as needles are looked up in it."""
    text = ANSI.sub("", preview)
    return KEY_LINE_PREFIX.sub("", text) if ours else text


def is_kept(needle: str, haystack: str) -> bool:
    """Tell whether a needle's text (first 200 chars, trimmed) is in the haystack."""
    key = needle.strip()[:MATCH_CHARS]
    return bool(key) and key in haystack


def position(offset: int, size: int) -> str:
    """Start, middle or end, by the needle line's byte offset in the output."""
    if size <= 0 or offset < START_SHARE * size:
        return "start"
    if offset >= END_SHARE * size:
        return "end"
    return "middle"
