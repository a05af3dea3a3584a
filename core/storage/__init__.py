"""Storage: the SQLite and PostgreSQL connections, the core's stores, backups and the
move from one engine to the other."""
