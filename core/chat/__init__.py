"""A chat as a whole: its key, its files, its data (listed, exported, deleted)."""
