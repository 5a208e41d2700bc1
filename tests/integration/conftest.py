"""Fixtures the GC tests of this tier share (see support.gc_world)."""

from support.gc_world import clock, sentinel, session  # noqa: F401 - fixtures by name
