"""Memory: AGENTS.md file memory, structured memories, embeddings and their ranking."""
