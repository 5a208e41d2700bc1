"""Shared test machinery (importable as `support` through pytest's pythonpath)."""
