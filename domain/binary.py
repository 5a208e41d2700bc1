"""Binary output: when bytes are no text to show, and the line shown instead (S1.4).

The rule, on the first `SNIFF_BYTES` (8 KiB) only: the bytes are binary when
they hold a NUL byte, or when more than 30% of the characters they decode to
(UTF-8, each invalid byte as U+FFFD, a sequence cut off at the end left out)
are U+FFFD or control characters other than tab, newline, vertical tab, form
feed, carriage return, backspace and ESC (which terminal output is full of).
Empty output is text. A model sees binary output as one description line: its
size, a type guessed from magic bytes, and its first `HEX_BYTES` bytes in hex;
its summary names the type and size too.
"""

from __future__ import annotations

import codecs
import re
from typing import Final

SNIFF_BYTES: Final = 8192
HEX_BYTES: Final = 16
_SUSPECT_SHARE: Final = 0.3
_SUSPECT: Final = re.compile("[\ufffd\x00-\x07\x0e-\x1a\x1c-\x1f\x7f]")
# (offset, magic, name), first match wins; ZIP and 0xCAFEBABE are told apart below.
_MAGIC: Final = (
    (0, b"\x89PNG\r\n\x1a\n", "PNG image"),
    (0, b"\xff\xd8\xff", "JPEG image"),
    (0, b"GIF87a", "GIF image"),
    (0, b"GIF89a", "GIF image"),
    (0, b"%PDF-", "PDF document"),
    (0, b"\x1f\x8b", "gzip data"),
    (0, b"BZh", "bzip2 data"),
    (0, b"\xfd7zXZ\x00", "xz data"),
    (0, b"\x28\xb5\x2f\xfd", "zstd data"),
    (0, b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (0, b"\x7fELF", "ELF binary"),
    (0, b"SQLite format 3\x00", "SQLite database"),
    (0, b"\x00asm", "WebAssembly module"),
    (0, b"MZ", "DOS/Windows executable"),
    (257, b"ustar", "tar archive"),
)
_ZIP: Final = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_ZIP_FIRST_NAME: Final = 30  # where a local file header's name starts
_CAFEBABE: Final = b"\xca\xfe\xba\xbe"
_FIRST_CLASS_VERSION: Final = 45  # Java 1.0; a fat Mach-O counts a few archs here


def is_binary(data: bytes) -> bool:
    """Tell whether `data` is binary by the rule of this module (its first 8 KiB)."""
    sample = data[:SNIFF_BYTES]
    if b"\x00" in sample:
        return True
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(sample, final=False)
    suspect = _SUSPECT.subn("", text)[1]
    return suspect > _SUSPECT_SHARE * len(text)


def guess_type(data: bytes) -> str:
    """Name the format `data` starts with, from its magic bytes, else "binary data"."""
    if data.startswith(_ZIP):
        first_entry = data[_ZIP_FIRST_NAME:]
        return "JAR archive" if first_entry.startswith(b"META-INF/") else "ZIP archive"
    if data.startswith(_CAFEBABE):
        version = int.from_bytes(data[4:8], "big")
        if version >= _FIRST_CLASS_VERSION:
            return "Java class file"
        return "Mach-O universal binary"
    for offset, magic, name in _MAGIC:
        if data.startswith(magic, offset):
            return name
    return "binary data"


def summarize_binary(head: bytes, size: int) -> str:
    """Return the summary of binary output (decoded as text it would be noise)."""
    return f"{guess_type(head)}, {size} bytes of binary output"


def describe_binary(head: bytes, size: int) -> str:
    """Return the one line shown for binary output of `size` bytes starting `head`."""
    shown = head[:HEX_BYTES]
    return (
        f"[binary output: {guess_type(head)}, {size} bytes; "
        f"first {len(shown)} bytes (hex): {shown.hex(' ')}]"
    )
