"""Everything that touches the world, in layers (see docs/architecture.md).

`storage` (files, event stores, lock) < `services` (use cases) < `owners` and
`harness` < `session` (the one composition root) < `mcp` < `hooks` < `cli`.
A layer imports only those below it; `make lint` enforces this with
import-linter.
"""
