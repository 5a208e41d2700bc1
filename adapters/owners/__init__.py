"""Owners: memory-owner adapters that publish and remove artifact references.

Imports `spillvault.domain` and `spillvault.adapters.storage` (for the
filesystem seam and the PostgreSQL connection settings); no service or CLI.
"""
