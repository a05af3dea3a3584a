"""Mnemo's exception hierarchy.

MnemoError
├── ConfigError          invalid or unreadable configuration
├── StorageError         database or migration failure
├── LLMError             the model could not give a usable answer
│   ├── LLMTimeout       no answer within [llm] timeout_s (after retries)
│   ├── LLMUnavailable   connection refused, 429 or 5xx after retries
│   ├── ContextOverflow  the provider says the request is larger than its window
│   └── LLMBadResponse   the answer could not be parsed
└── ToolError            a tool was called with bad arguments or failed
"""

from __future__ import annotations


class MnemoError(Exception):
    """Base class of every error Mnemo raises on purpose."""


class ConfigError(MnemoError):
    """The configuration file or environment is invalid."""


class StorageError(MnemoError):
    """The database could not be opened or migrated."""


class LLMError(MnemoError):
    """The model did not give a usable answer."""


class LLMTimeout(LLMError):
    """The model did not answer in time."""


class LLMUnavailable(LLMError):
    """The model server refused, rate-limited or failed the request."""


class ContextOverflow(LLMError):
    """The provider rejected the request as longer than its context window."""


class LLMBadResponse(LLMError):
    """The model's answer could not be parsed."""


class ToolError(MnemoError):
    """A tool call failed; the message is shown to the model."""
