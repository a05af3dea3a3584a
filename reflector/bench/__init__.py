"""The reflector's benchmark: `mnemo bench reflector` (pass time vs history length)."""
