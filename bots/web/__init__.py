"""The operator's dashboard: what the bot knows about each chat, why, and what it will send
next, in a browser (`mnemo web`, or inside `mnemo run` with `[web] enabled`)."""
