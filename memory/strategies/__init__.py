"""Learned strategies: what works when serving a chat, earned through evidence (ACE/AceClaw)."""
