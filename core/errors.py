"""Mnemo's exception hierarchy.

MnemoError
├── ConfigError            invalid or unreadable configuration
├── InputError             bad input from a user, a tool call or the CLI (too long, bad id, …)
├── StorageError           database or migration failure
│   ├── LeaseLost          another process took the chat over while this one worked
│   ├── StorageFull        the disk (or the database's size limit) is full: nothing was written
│   └── DatabaseGone       the open database file was deleted or replaced under the process
├── EmbeddingUnavailable   the embedding model cannot be loaded or exported as asked
├── EmbeddedModelError     the embedded demo model is not installed or did not start
├── DeliveryFailed         a channel could not deliver a reply, after its own retries
├── LLMError               the model could not give a usable answer
│   ├── LLMTimeout         no answer within [llm] timeout_s (after retries)
│   ├── LLMUnavailable     connection refused, 429 or 5xx after retries
│   ├── ContextOverflow    the provider says the request is larger than its window
│   ├── LLMRejected        the server refused this request for good (a 4xx, a template error)
│   │   ├── TemplateRejected   the chat template refuses a system message after the first
│   │   ├── ToolsUnsupported   the model or server does not do tool calls
│   │   ├── ModelMissing       the configured model is not served
│   │   └── FormatUnsupported  the structured-output request (response_format) is refused
│   └── LLMBadResponse     the answer could not be parsed
│       ├── AnswerNotJSON  a 200 whose body is not JSON (a web page, a proxy's error)
│       └── ReplyInvalid   the answer is not the JSON object the prompt asks for
├── ToolError              a tool was called with bad arguments or failed
├── FetchError             a guarded HTTP fetch (web_fetch, `mnemo skills add URL`) failed
│   ├── FetchRefused       the URL's scheme or address is not allowed (private, loopback, …)
│   ├── FetchTooLarge      the body went over the size cap (the rest was not read)
│   └── FetchTimeout       the fetch (redirects and body included) went over its deadline
├── SkillError             a skill is malformed, unknown, or a path escapes its folder
└── MediaError             an image or voice message could not be used
    ├── ImageRejected      not an image Pillow reads, too large to decode, or over the caps
    └── TranscriptionFailed  no transcription server, over the caps, or the server failed

Other packages subclass these where a caller must tell a case apart:
`memory.keeper.FactRefused` (a ToolError: the quality gate refused a fact),
`core.mcp.http_session.McpRefused` (a ToolError: an MCP server over HTTP said no, e.g. HTTP 429;
it stays up) and `bots.telegram_webhook.NotStored` (a StorageError: Telegram is answered 503
and resends).
Only the test harnesses in `core/bench/fakes/` raise errors outside this tree, on purpose.
"""

from __future__ import annotations


class MnemoError(Exception):
    """Base class of every error Mnemo raises on purpose."""


class ConfigError(MnemoError):
    """The configuration file or environment is invalid."""


class InputError(MnemoError, ValueError):
    """Input that cannot be used as given; the message says what is wrong with it."""


class StorageError(MnemoError):
    """The database could not be opened or migrated."""


class LeaseLost(StorageError):
    """Another pass or process took the chat over (or moved its cursor) meanwhile."""


class StorageFull(StorageError):
    """The disk or the database file is full (SQLITE_FULL); the write did not happen."""


class DatabaseGone(StorageError):
    """The SQLite file this process opened is no longer the one at its path (deleted, or
    replaced by another file): writing on would go into a file nobody will open again."""


class EmbeddingUnavailable(MnemoError):
    """The embedding model cannot be loaded, or not in the form asked for (e.g. ONNX)."""


class EmbeddedModelError(MnemoError):
    """The embedded demo model (`[embedded]`) is not installed, or its server did not start."""


class DeliveryFailed(MnemoError):
    """A channel gave up delivering a reply (after waiting out rate limits and retrying).

    `parts_sent` of `parts_total` messages went out before it gave up. `retryable` says
    whether sending later may work (a rate limit, the network) or not (the bot was
    blocked, the chat is gone, the platform rejects the text).
    """

    def __init__(self, message: str, *, parts_sent: int, parts_total: int, retryable: bool) -> None:
        super().__init__(message)
        self.parts_sent = parts_sent
        self.parts_total = parts_total
        self.retryable = retryable


class LLMError(MnemoError):
    """The model did not give a usable answer."""


class LLMTimeout(LLMError):
    """The model did not answer in time."""


class LLMUnavailable(LLMError):
    """The model server refused, rate-limited or failed the request."""


class ContextOverflow(LLMError):
    """The provider rejected the request as longer than its context window.

    `limit` is the window the error states ("maximum context length is 2048 tokens"),
    when it states one; `prompt_tokens` the prompt's size as the server counted it
    ("(2116 in the messages, …)"), when it states that.
    """

    def __init__(
        self, message: str, limit: int | None = None, prompt_tokens: int | None = None
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.prompt_tokens = prompt_tokens


class LLMRejected(LLMError):
    """The server refused the request in a way a retry cannot change."""


class TemplateRejected(LLMRejected):
    """The model's chat template refuses a system message that is not the first message."""


class ToolsUnsupported(LLMRejected):
    """The model (or its server) does not support tool calls."""


class ModelMissing(LLMRejected):
    """The configured model is not served (not pulled, misspelt)."""


class FormatUnsupported(LLMRejected):
    """The server refuses the requested `response_format` (structured output)."""


class LLMBadResponse(LLMError):
    """The model's answer could not be parsed."""


class AnswerNotJSON(LLMBadResponse):
    """The model server answered 200 with a body that is not JSON: often `base_url` names
    a web page (a UI, a proxy) instead of the OpenAI-compatible API."""


class ReplyInvalid(LLMBadResponse):
    """The model's reply is not the JSON object the prompt asks for."""


class ToolError(MnemoError):
    """A tool call failed; the message is shown to the model."""


class FetchError(MnemoError):
    """A guarded fetch failed: the connection, the HTTP status, or too many redirects."""


class FetchRefused(FetchError):
    """The URL is refused before any byte is sent to it: a scheme other than http(s), or a
    host resolving to a loopback, private, link-local, metadata, multicast or unspecified
    address that the operator did not allow (`[fetch] allow`)."""


class FetchTooLarge(FetchError):
    """The body went over `[fetch] max_bytes`; reading stopped at the cap."""


class FetchTimeout(FetchError):
    """The fetch went over `[fetch] timeout_s` (connects, redirects and the body together)."""


class SkillError(MnemoError, ValueError):
    """A skill is malformed (front matter, name, size), unknown, or a path leaves its folder;
    the message says which and why."""


class MediaError(MnemoError):
    """An image or a voice message could not be used; the message says why, for the user."""


class ImageRejected(MediaError):
    """The image cannot be read, is too large to decode, or cannot fit the caps."""


class TranscriptionFailed(MediaError):
    """A voice message could not be transcribed (none configured, caps, server failure)."""
