"""`mnemo doctor`: one line per check, and whether the platform can work."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fatal: bool = True  # a failed fatal check means the platform cannot work

    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.fatal else "warn")
        return f"[{mark}] {self.name}: {self.detail}"


def llm_setup_hint(base_url: str) -> str:
    return (
        f"No model server answered at {base_url}. Start one there (for example "
        "`ollama serve` and `ollama pull llama3.2`), or point Mnemo at another "
        "OpenAI-compatible server: set OPENAI_BASE_URL (and OPENAI_API_KEY if it needs one), "
        "or [llm] base_url / model in config.toml (see config.example.toml)."
    )
