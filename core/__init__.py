"""Mnemo's shared core: config, storage, the turn loop, context and the LLM client."""
