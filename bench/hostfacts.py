"""Facts about the host that every benchmark prints next to its figures."""

from __future__ import annotations

import os


def load_average() -> str:
    """The 1-minute load average: other work on the host skews every figure."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


def fs_type(path: str) -> str:
    """Name the file system holding `path` (best effort, from /proc/mounts)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            rows = [line.split() for line in mounts]
    except OSError:
        return "unknown"
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    for row in rows:
        if len(row) < 3:
            continue
        mount_point = row[1]
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > len(best):
            best, kind = mount_point, row[2]
    return kind
