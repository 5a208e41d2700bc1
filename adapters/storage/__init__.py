"""Storage: the filesystem seam, artifact files, event stores, lock and journal file.

Imports `spillvault.domain` and nothing else of ours: no service, owner,
harness or CLI code. Everything here is swappable behind a port.
"""
