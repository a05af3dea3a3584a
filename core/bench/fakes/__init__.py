"""The servers the benchmarks (and the tests) run against on 127.0.0.1: fakes of remote
APIs (OpenAI, Telegram Bot API), a round-robin proxy, real PostgreSQL and llama.cpp."""
