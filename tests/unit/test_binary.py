"""Binary output: the detection rule, the type guess, the description line (S1.4)."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import zipfile
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.binary import (
    HEX_BYTES,
    SNIFF_BYTES,
    describe_binary,
    guess_type,
    is_binary,
)


def png(width: int = 1, height: int = 1) -> bytes:
    """A valid one-colour PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + b"\x80" * width * height)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", pixels)
        + chunk(b"IEND", b"")
    )


def zipped(first_name: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(first_name, "Manifest-Version: 1.0\n")
        archive.writestr("b.txt", "b")
    return out.getvalue()


def tarred() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        info = tarfile.TarInfo("notes.txt")
        info.size = 5
        archive.addfile(info, io.BytesIO(b"notes"))
    return out.getvalue()


def suspects(count: int, total: int) -> bytes:
    """`total` characters of which `count` are invalid UTF-8 bytes (U+FFFD)."""
    return b"\xff" * count + b"a" * (total - count)


# ------------------------------------------------------------------- the rule


def test_one_nul_in_the_first_8_kib_makes_bytes_binary() -> None:
    text = b"plain log line\n" * 1000
    assert not is_binary(text)
    assert is_binary(b"\x00" + text)
    last = b"a" * (SNIFF_BYTES - 1) + b"\x00"
    assert is_binary(last)
    assert not is_binary(last[:-1] + b"a" + b"\x00")  # just past the sniffed part


def test_more_than_30_percent_replacement_characters_is_binary() -> None:
    assert not is_binary(suspects(30, 100))
    assert is_binary(suspects(31, 100))
    # Latin-1 prose: one invalid byte per accented letter, far under 30%
    assert not is_binary("Déjà vu à la française, très élégant.\n".encode("latin-1"))


def test_controls_count_but_terminal_ones_do_not() -> None:
    assert is_binary(b"\x01\x02\x03abcd")  # 3 of 7
    assert not is_binary(b"\x01\x02abcde")  # 2 of 7
    assert is_binary(b"\x7f" * 4 + b"abcdef")
    # tab, newlines, vertical tab, form feed, CR, backspace and ESC are text
    assert not is_binary(b"\t\n\x0b\x0c\r\x08\x1b" * 100)
    colored = b"\x1b[32mPASSED\x1b[0m\x1b[32m [ 50%]\x1b[0m\r\n" * 300
    assert not is_binary(colored)


def test_only_the_first_8_kib_are_judged() -> None:
    assert not is_binary(b"a" * SNIFF_BYTES + b"\xff" * 100_000)
    assert is_binary(b"\xff" * SNIFF_BYTES + b"a" * 100_000)


def test_a_character_cut_at_8_kib_is_not_counted() -> None:
    euro = "\u20ac".encode()  # three bytes
    data = euro * (SNIFF_BYTES // 3) + euro  # the 8 KiB end inside a euro sign
    assert len(data) > SNIFF_BYTES
    assert not is_binary(data)


def test_empty_output_is_text_and_utf16_is_binary() -> None:
    assert not is_binary(b"")
    assert is_binary("hello".encode("utf-16-le"))


def printable_or_terminal(char: str) -> bool:
    return char in "\t\n\r\x1b" or (char >= " " and char not in "\x7f\ufffd")


@given(st.text())
def test_property_text_without_nul_or_controls_is_never_binary(text: str) -> None:
    clean = "".join(filter(printable_or_terminal, text))
    assert not is_binary(clean.encode())


# ------------------------------------------------------------ the type guess


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (png(), "PNG image"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "JPEG image"),
        (b"GIF89a\x01\x00\x01\x00\x00\x00\x00", "GIF image"),
        (b"GIF87a\x01\x00", "GIF image"),
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "PDF document"),
        (zipped("a.txt"), "ZIP archive"),
        (zipped("META-INF/MANIFEST.MF"), "JAR archive"),
        (b"PK\x05\x06" + b"\x00" * 18, "ZIP archive"),  # an empty archive
        (gzip.compress(b"payload", mtime=0), "gzip data"),
        (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8, "ELF binary"),
        (b"SQLite format 3\x00\x10\x00", "SQLite database"),
        (tarred(), "tar archive"),
        (b"\x00asm\x01\x00\x00\x00", "WebAssembly module"),
        (b"\xca\xfe\xba\xbe\x00\x00\x00\x41", "Java class file"),  # Java 21
        (b"\xca\xfe\xba\xbe\x00\x00\x00\x02", "Mach-O universal binary"),
        (b"BZh91AY&SY", "bzip2 data"),
        (b"\xfd7zXZ\x00\x00", "xz data"),
        (b"\x28\xb5\x2f\xfd\x00", "zstd data"),
        (b"7z\xbc\xaf\x27\x1c\x00\x04", "7-Zip archive"),
        (b"MZ\x90\x00\x03\x00", "DOS/Windows executable"),
        (b"\x00\x01\x02\x03", "binary data"),
        (b"", "binary data"),
    ],
)
def test_the_type_is_guessed_from_magic_bytes(data: bytes, kind: str) -> None:
    assert guess_type(data) == kind


def test_every_guessed_format_sample_is_binary_by_the_rule() -> None:
    for data in (png(), zipped("a"), gzip.compress(b"x" * 100), tarred()):
        assert is_binary(data)


# ------------------------------------------------------------ the description


def test_the_description_is_one_line_with_size_type_and_hex_head() -> None:
    data = png()
    line = describe_binary(data, len(data))
    assert line == (
        f"[binary output: PNG image, {len(data)} bytes; first 16 bytes (hex): "
        "89 50 4e 47 0d 0a 1a 0a 00 00 00 0d 49 48 44 52]"
    )
    assert "\n" not in line


def test_a_short_output_shows_all_its_bytes() -> None:
    line = describe_binary(b"\x00\x01\xfe", 3)
    assert line.endswith("3 bytes; first 3 bytes (hex): 00 01 fe]")


def test_the_hex_head_is_bounded() -> None:
    line = describe_binary(b"\x01" * 10_000, 10**12)
    assert line.count("01") == HEX_BYTES
    assert "1000000000000 bytes" in line
