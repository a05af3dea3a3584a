"""Tools: the registry, big results kept as the chat's files, tool calls a model wrote
as text."""
