"""`mnemo doctor`'s advice when no model server answers, and its storage checks (the
checks are `core.api.Check`)."""

from __future__ import annotations

from core.api import Check
from core.storage.database import PostgresDatabase, sqlite_connection
from core.storage.engine import Storage


def llm_setup_hint(base_url: str) -> str:
    return (
        f"No model server answered at {base_url}. Start one there (for example "
        "`ollama serve` and `ollama pull llama3.2`), or point Mnemo at another "
        "OpenAI-compatible server: set OPENAI_BASE_URL (and OPENAI_API_KEY if it needs one), "
        "or [llm] base_url / model in config.toml (see config.example.toml)."
    )


def storage_checks(storage: Storage) -> list[Check]:
    """The database, and whether vector search runs in it (sqlite-vec, pgvector)."""
    return [Check("database", True, storage.describe()), vector_check(storage)]


def vector_check(storage: Storage) -> Check:
    """Whether vector search runs in the database (sqlite-vec, pgvector) or falls back."""
    if isinstance(storage.database, PostgresDatabase):
        pg = storage.database.pg.info
        if pg.vector_loaded:
            return Check("pgvector", True, f"installed {pg.vector_version}")
        return Check(
            "pgvector",
            False,
            f"not available ({pg.vector_error}); memories are ranked in this process",
            fatal=False,
        )
    info = sqlite_connection(storage.database).info
    if info.vec_loaded:
        return Check("sqlite-vec", True, f"loaded {info.vec_version}")
    return Check(
        "sqlite-vec",
        False,
        f"not loaded ({info.vec_error}); memory ranking uses keywords only",
        fatal=False,
    )
