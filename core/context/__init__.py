"""One model request: its assembly, budgets, request-time pruning, compaction and
summaries, and the report of what it holds."""
