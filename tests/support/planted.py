"""Planted bugs: each switches one safeguard off, from tests only (issue 7).

Three live in production code behind `domain.safeguards.Safeguards`, injected
through `open_session`; the others are planted through the filesystem seam
(`PlantedFS`) or by injecting an owner whose fence skips its check
(`UncheckedFenceOwner`). Production code reads no environment variable.
"""

from __future__ import annotations

import os
from typing import Any

from spillvault.adapters.owners.owner_common import RecordFence
from spillvault.domain.enums import ArtifactReferencePresence
from spillvault.domain.values import ArtifactReferenceObservation

from support.crash_world import WatchedOwner
from support.crashfs import CrashFS

PLANTS = ("no_publish_dir_fsync", "no_truncate_before_append", "no_nlink_check")


class PlantedFS(CrashFS):
    """CrashFS with one filesystem-level safeguard defeated (`plant`)."""

    def __init__(
        self, root: str | os.PathLike[str], *, plant: str, **kwargs: Any
    ) -> None:
        if plant not in PLANTS:
            msg = f"unknown plant {plant!r}; choose one of {PLANTS}"
            raise ValueError(msg)
        super().__init__(root, **kwargs)
        self.plant = plant

    def fsync(self, fd: int) -> None:  # type: ignore[override]
        """Drop the results directory's fsyncs: the publish's link is never durable."""
        path = self._fds.get(fd) or os.readlink(f"/proc/self/fd/{fd}")
        if self.plant == "no_publish_dir_fsync" and path.endswith("/tool-results"):
            self._step("fsync", f"{self._rel(path)} (dropped: planted bug)")
            return
        super().fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:  # type: ignore[override]
        """Pretend to truncate: the next record is glued onto a torn tail."""
        if self.plant == "no_truncate_before_append":
            self._step("ftruncate", f"fd {fd} to {length} (dropped: planted bug)")
            return
        super().ftruncate(fd, length)

    def fstat(self, fd: int) -> os.stat_result:  # type: ignore[override]
        """Report one link whatever the truth: GC's nlink check sees nothing."""
        info = super().fstat(fd)
        if self.plant != "no_nlink_check":
            return info
        return _OneLink(info)  # type: ignore[return-value]


class _OneLink:
    """A stat result that says `st_nlink == 1` and is true about the rest."""

    st_nlink = 1

    def __init__(self, info: os.stat_result) -> None:
        self._info = info

    def __getattr__(self, name: str) -> Any:
        return getattr(self._info, name)


def planted_fs(plant: str) -> type[PlantedFS]:
    """Return a factory class for `CrashWorld(fs_factory=...)` with `plant`."""

    class Planted(PlantedFS):
        def __init__(self, root: str | os.PathLike[str], **kwargs: Any) -> None:
            super().__init__(root, plant=plant, **kwargs)

    Planted.__name__ = f"PlantedFS[{plant}]"
    return Planted


class _UncheckedFence(RecordFence):
    """A fence whose seal skips the generation check: it trusts a stale read."""

    def seal_absent(self) -> ArtifactReferenceObservation:
        record = self._slot.load()
        if record.reference is None:
            return super().seal_absent()
        # A store without the CAS writes its tombstone beside the reference that
        # slipped in, and reports the seal it believes it made.
        return ArtifactReferenceObservation(
            self._transaction_id,
            record.generation + 1,
            ArtifactReferencePresence.ABSENT,
            absence_sealed=True,
        )


class UncheckedFenceOwner(WatchedOwner):
    """The crash world's owner with the generation check of `seal_absent` removed."""

    _fence_type = _UncheckedFence
