"""The core's benchmarks (`mnemo bench longrun|startup|kv|chaos`) and what they share. Not tests:
they print figures for the README, as text or, with `--json`, as one JSON object."""
