"""Memory's benchmarks: `mnemo bench locomo` (recall) and `mnemo bench memory` (ranking
latency). Figures, never assertions."""
