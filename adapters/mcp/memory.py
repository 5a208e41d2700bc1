"""Give the freed memory of a huge message back to the system (glibc only).

glibc keeps freed blocks in its heaps, so after a 100 MB message the
process stays large and the next one grows it further; `malloc_trim`
returns what is free. Elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import Any


@cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_freed_memory() -> None:
    """Return the heap's free memory to the system, where glibc can."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


__all__ = ["release_freed_memory"]
