"""MCP: `spillvault mcp serve` and the spill proxy (install the `mcp` extra)."""
