"""Skills: SKILL.md folders (front matter `name` + `description`, then instructions) in
three scopes, listed in the dynamic context and read on demand by the model's tools.

A plugin like memory's strategies (`core.skills.plugin`). It lives in `core` because it
needs only the core (the file store, the turn API, the guarded fetch) and nothing of
`memory`: skills are instructions, not remembered facts, and scheduled tasks and
sub-agents (also core) decide whether a skill list goes with them.
"""
