"""Testing utilities shipped with Mnemo on purpose: fakes of remote APIs on 127.0.0.1.

The benchmarks and the test suite both use them (httpx ships `MockTransport` the same way).
"""
