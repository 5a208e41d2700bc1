"""Reusable conformance suites for those who write a backend or an owner adapter.

Subclass a suite's test case in your own tests, the way eventsourcing's
`eventsourcing.tests` are used: `owners` for memory-owner adapters,
`event_stores` for event-store backends, `artifact_stores` for artifact stores.
They are `unittest.TestCase`s, run by unittest or pytest, and need neither
pytest nor Hypothesis (docs/backends.md, docs/owner-adapters.md).
"""
