"""Services: the use cases over one open session (spill, read, lease, reconcile, GC).

Imports `spillvault.domain` and `spillvault.adapters.storage`. A service is
handed its session's handles by the composition root (`adapters/session.py`)
and never opens a session itself.
"""
