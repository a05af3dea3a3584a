"""Mnemo's shared core: config, storage, the turn loop, context and the LLM client."""

__version__ = "0.1.0"
