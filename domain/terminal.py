"""Terminal noise: what a preview leaves out of captured terminal output (S1.4).

`clean_terminal` removes ANSI escape sequences (CSI, which covers SGR colours
and cursor moves; OSC, which covers hyperlinks, ended by BEL or ST; DCS, SOS,
PM and APC strings; every other ESC sequence; and a stray ESC on its own), then
reduces each line to what its last carriage return left: a progress line
`10%<CR>50%<CR>100%` becomes `100%`. A carriage return that nothing follows on its
line (a CRLF line end, or the end of the text) only ends the line. Newlines are
never added or removed, so line N of the cleaned text is line N of the output.
The result is never longer, holds no ESC and no CR, and cleaning it again
changes nothing.
"""

from __future__ import annotations

import re
from typing import Final

_ESCAPES: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: parameter bytes, intermediates, a final byte
    r"|\x1b[\]PX^_][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC/DCS/SOS/PM/APC to BEL or ST
    r"|\x1b[ -/]*[0-~]"  # any other sequence: intermediates, a final byte
    r"|\x1b"  # a stray ESC (an unfinished sequence, say)
)
# The lookbehind lets only the first CR of a run try to match, so a long run
# of CRs costs linear time, not quadratic.
_CRS_ENDING_A_LINE: Final = re.compile(r"(?<!\r)\r+(?=\n|\Z)")
# Anchored at line starts: each line is scanned once, up to its last CR.
_OVERWRITTEN: Final = re.compile(r"^[^\n]*\r", re.MULTILINE)


def clean_terminal(text: str) -> str:
    """Return `text` as a terminal would leave it, line for line (see the module)."""
    if "\x1b" in text:
        text = _ESCAPES.sub("", text)
    if "\r" in text:
        text = _OVERWRITTEN.sub("", _CRS_ENDING_A_LINE.sub("", text))
    return text
