"""Harness: what an agent loop touches — message gating, microcompact, model tools.

Imports `spillvault.domain` and the services; never the CLI.
"""
