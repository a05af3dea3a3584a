"""`mnemo doctor`'s advice when no model server answers (the checks are `core.api.Check`)."""

from __future__ import annotations


def llm_setup_hint(base_url: str) -> str:
    return (
        f"No model server answered at {base_url}. Start one there (for example "
        "`ollama serve` and `ollama pull llama3.2`), or point Mnemo at another "
        "OpenAI-compatible server: set OPENAI_BASE_URL (and OPENAI_API_KEY if it needs one), "
        "or [llm] base_url / model in config.toml (see config.example.toml)."
    )
