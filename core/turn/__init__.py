"""The turn: a message's way from the dispatcher through the tool loop to the reply,
and the extensions and hooks that plug into it."""
