"""Sub-agents: the `spawn_agent` tool, a child's restricted run, and its stored transcript."""
