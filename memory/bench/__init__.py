"""Memory's benchmarks: `mnemo bench locomo` (recall), `mnemo bench memory` (ranking
latency), and `mnemo bench prefix` with the real memory store. Figures, never assertions."""
