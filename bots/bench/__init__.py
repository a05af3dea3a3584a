"""The channels' benchmarks (`mnemo bench stream`)."""
