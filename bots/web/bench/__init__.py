"""The dashboard's benchmark: `mnemo bench web` (every page's server time on a busy bot's data)."""
