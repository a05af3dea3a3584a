"""Fakes only the tests use (the benchmarks' servers are in `core.bench.fakes`)."""
