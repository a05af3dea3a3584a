"""MCP servers as tool sources: connections with restart, schema cleaning, who may use what.

A plugin (`core.mcp.plugin`) like the built-ins: it lives in `core` because it depends on
nothing but `core` and the `mcp` SDK, and every bot (memory or not) can use it.
"""
