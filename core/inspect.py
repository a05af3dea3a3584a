"""What a chat's next request looks like: `/context` and `mnemo inspect CHAT [--json]`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from core.budget import SectionMeta
from core.request_plan import plan_request
from core.tokens import context_window, load_calibration

if TYPE_CHECKING:
    from core.turn import Agent, TurnContext


@dataclass(frozen=True)
class ContextReport:
    chat: str
    model: str
    context_window: int
    effective_window: int
    prefix_chars: int
    prefix_tokens: int
    summary_tokens: int
    history_messages: int
    history_tokens: int
    dynamic_tokens: int
    newest_tokens: int
    sections: list[SectionMeta]
    total_tokens: int
    pressure: str
    would_prune: bool
    compactions: int
    tokens_saved: int
    chars_per_token: float
    calibration_samples: int
    last_observed_ratio: float | None

    @property
    def share(self) -> float:
        return self.total_tokens / self.effective_window

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["share"] = round(self.share, 4)
        return data

    def render(self) -> str:
        lines = [
            f"Context of {self.chat} (model {self.model})",
            f"static prefix: {self.prefix_chars} chars, ~{self.prefix_tokens} tokens",
            f"summary: ~{self.summary_tokens} tokens",
            f"history: {self.history_messages} messages, ~{self.history_tokens} tokens"
            f" (+ newest ~{self.newest_tokens})",
            f"dynamic context: ~{self.dynamic_tokens} tokens in {len(self.sections)} sections",
        ]
        for meta in self.sections:
            flags = ", ".join(
                flag
                for flag, on in (
                    ("protected", meta.protected),
                    ("truncated", meta.truncated),
                    ("dropped", not meta.included),
                )
                if on
            )
            lines.append(
                f"  - {meta.key} ({meta.source}, priority {meta.priority}):"
                f" {meta.final_chars}/{meta.original_chars} chars{f', {flags}' if flags else ''}"
            )
        lines += [
            f"total: ~{self.total_tokens} of {self.effective_window} tokens"
            f" ({self.share:.0%}, window {self.context_window} minus output),"
            f" pressure {self.pressure}{', old tool results pruned' if self.would_prune else ''}",
            f"compactions: {self.compactions}, tokens saved: {self.tokens_saved}",
            f"calibration: {self.chars_per_token:.2f} chars/token after"
            f" {self.calibration_samples} samples"
            + (
                f" (last observed {self.last_observed_ratio:.2f})"
                if self.last_observed_ratio
                else ""
            ),
        ]
        return "\n".join(lines)


def compaction_totals(agent: Agent, chat_id: int) -> tuple[int, int]:
    """(compactions so far, estimated tokens saved by them) for the chat."""
    count, saved = agent.store.conn.execute(
        "SELECT count(*), coalesce(sum(max(tokens_before - tokens_after, 0)), 0)"
        " FROM compactions WHERE chat_id = ?",
        (chat_id,),
    ).fetchone()
    return int(count), int(saved)


async def context_report(agent: Agent, turn: TurnContext) -> ContextReport:
    """Plan the chat's next request (without the model) and describe it."""
    plan = await plan_request(agent, turn, [], tools=True)
    history = agent.store.history(turn.chat.id)
    calibration = load_calibration(agent.store.conn, agent.llm.model)
    compactions, saved = compaction_totals(agent, turn.chat.id)
    prefix = plan.messages[0]["content"]
    return ContextReport(
        chat=turn.chat.key,
        model=agent.llm.model,
        context_window=context_window(agent.config.llm),
        effective_window=plan.window,
        prefix_chars=len(prefix),
        prefix_tokens=plan.parts["prefix"],
        summary_tokens=plan.parts["summary"],
        history_messages=len(history),
        history_tokens=plan.parts["history"],
        dynamic_tokens=plan.parts["dynamic"],
        newest_tokens=plan.parts["newest"],
        sections=plan.sections,
        total_tokens=plan.tokens,
        pressure=plan.pressure,
        would_prune=plan.prune.pruned,
        compactions=max(compactions, agent.store.session(turn.chat.id).compaction_count),
        tokens_saved=saved,
        chars_per_token=plan.estimator.chars_per_token,
        calibration_samples=calibration.samples if calibration else 0,
        last_observed_ratio=calibration.last_ratio if calibration else None,
    )
