"""The model's HTTP clients share one TLS context: loading the CA bundle is paid once per
process (`core.model.tls`), and the clients still talk to the server."""

from __future__ import annotations

import ssl

from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import LLMConfig
from core.model.client import OpenAILLM
from core.model.tls import shared_tls_context


async def test_each_model_client_uses_the_one_shared_context(fake_llm: FakeOpenAIServer) -> None:
    context = shared_tls_context()
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    for _ in range(2):  # a new client (a new event loop gets one) takes the same context
        llm = OpenAILLM(LLMConfig(base_url=fake_llm.base_url, max_retries=0))
        pool = llm.client()._transport._pool  # httpx's transport, httpcore's pool
        assert pool._ssl_context is context
        assert await llm.ping()
        await llm.aclose()
