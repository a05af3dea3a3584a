"""The TLS context the model's HTTP clients share: building one loads the CA bundle
(~40 ms of CPU), so the process pays it once, not once per client (`mnemo chat` makes
two before its first reply: the check that a server answers, and the model client)."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    """httpx's default context (certifi's CA bundle, or `SSL_CERT_FILE` / `SSL_CERT_DIR`),
    made on first use."""
    import httpx

    return httpx.create_ssl_context()
