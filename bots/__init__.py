"""Channel adapters (terminal, Telegram, Discord) and the `mnemo` command that wires them up."""
