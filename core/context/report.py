"""What a chat's next request looks like: `/context` and `mnemo inspect CHAT [--json]`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from core.api import Chat, ContextSection
from core.chat.images import ImagePart, image_tokens
from core.config import MediaConfig
from core.context.budget import SectionMeta
from core.context.plan import RequestPlan, RequestPlanner
from core.model.profile import load_profile, model_label, server_disagrees


@dataclass(frozen=True)
class ContextReport:
    chat: str
    model: str
    context_window: int
    window_source: str
    window_warning: str
    effective_window: int
    prefix_chars: int
    prefix_tokens: int
    summary_tokens: int
    history_messages: int
    history_tokens: int
    dynamic_tokens: int
    newest_tokens: int
    tool_count: int  # tools offered with the request
    tools_tokens: int  # their schemas (0 when the server's template drops them)
    tools_dropped: bool  # the template leaves the schemas out of the prompt
    tools_compacted: bool  # over their budget: descriptions cut to a sentence
    tools_left_out: dict[str, str]  # tool name -> why a small window did not offer it
    framing_tokens: int  # the rest of the total: the answer's header, rounding, pruning
    sections: list[SectionMeta]
    total_tokens: int
    peak_tokens: int  # the largest request of this chat so far, as the server counted it
    pressure: str
    would_prune: bool
    compactions: int
    tokens_saved: int
    chars_per_token: float
    calibration_samples: int
    last_observed_ratio: float | None
    # The extensions' lines beyond the request (sub-agent runs with their provenance).
    notes: list[str] = field(default_factory=list)
    image_count: int = 0  # image parts in the request (only an image turn's own requests)
    image_tokens: int = 0  # what they cost, as planned
    image_cap_tokens: int = 0  # what an image at the pixel cap is planned at

    @property
    def share(self) -> float:
        return self.total_tokens / self.effective_window

    def parts(self) -> dict[str, int]:
        """Every part of `total_tokens`, by name; they sum to it exactly."""
        return {
            "static prefix": self.prefix_tokens,
            "summary": self.summary_tokens,
            "history": self.history_tokens,
            "dynamic context": self.dynamic_tokens,
            "newest message": self.newest_tokens,
            "images": self.image_tokens,
            "tool schemas": self.tools_tokens,
            "framing": self.framing_tokens,
        }

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["share"] = round(self.share, 4)
        return data

    def tool_lines(self) -> list[str]:
        """The tool schemas' line, and one per tool a small window left out (and why)."""
        tools = f"tool schemas: {self.tool_count} tools, ~{self.tools_tokens} tokens"
        if self.tools_dropped:
            tools = f"tool schemas: {self.tool_count} tools, dropped by the server's template (0)"
        if self.tools_compacted:
            tools += " (descriptions compacted to fit the tool budget)"
        left_out = [f"  - left out: {name} ({why})" for name, why in self.tools_left_out.items()]
        return [tools, *left_out]

    def image_line(self) -> str:
        """The images' part: an image goes only with its own turn's requests, planned in."""
        cap = f"~{self.image_cap_tokens} tokens for an image at the pixel cap"
        if not self.image_count:
            return f"images: none (an image is sent with its own turn only; {cap})"
        return f"images: {self.image_count}, ~{self.image_tokens} tokens ({cap})"

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
            why = f" [{meta.reason}]" if meta.reason else ""
            lines.append(
                f"  - {meta.key} ({meta.source}, priority {meta.priority}):"
                f" {meta.final_chars}/{meta.original_chars} chars{f', {flags}' if flags else ''}"
                f"{why}"
            )
        pruned = ", minus pruned tool results" if self.would_prune else ""
        lines += [
            self.image_line(),
            *self.tool_lines(),
            f"framing: ~{self.framing_tokens} tokens (the answer's turn header, rounding{pruned})",
            f"total: ~{self.total_tokens} of {self.effective_window} tokens"
            f" ({self.share:.0%}, window {self.context_window} from {self.window_source},"
            " minus the answer's reserve),"
            f" pressure {self.pressure}{', old tool results pruned' if self.would_prune else ''}",
            f"peak: ~{self.peak_tokens} tokens"
            f" ({self.peak_tokens / self.effective_window:.0%}; the largest request of this chat)",
            f"compactions: {self.compactions}, tokens saved: {self.tokens_saved}",
            f"calibration: {self.chars_per_token:.2f} chars/token after"
            f" {self.calibration_samples} samples"
            + (
                f" (last observed {self.last_observed_ratio:.2f})"
                if self.last_observed_ratio
                else ""
            ),
        ]
        if self.window_warning:
            lines.append(f"warning: {self.window_warning}")
        return "\n".join([*lines, *self.notes])


def cap_image_tokens(media: MediaConfig) -> int:
    """What a 4:3 image at `max_image_pixels` is planned at (`[media] image_tokens` if set)."""
    height = int((media.max_image_pixels * 3 / 4) ** 0.5)
    return image_tokens(ImagePart("", height * 4 // 3, height), media.image_tokens)


PEAK_KIND = "turn"  # the usage kind of chat requests (`core.turn.agent.USAGE_KIND`)


def section_detail(
    planner: RequestPlanner, chat: Chat, sections: Sequence[ContextSection], key: str
) -> str:
    """`/context KEY`: one section of the next request in full, with its evidence (source,
    scope, priority, why it was included, what the budget did to it)."""
    plan = planner.plan(chat, sections, tools=False)
    metas = {meta.key: meta for meta in plan.sections}
    meta = metas.get(key.strip())
    if meta is None:
        known = ", ".join(metas) or "none"
        return f"No section {key.strip()!r} in the next request. Sections: {known}."
    text = next(section.text for section in sections if section.key == meta.key)
    state = "dropped by the budget" if not meta.included else "included"
    if meta.included and meta.truncated:
        state = f"included, cut to {meta.final_chars} of {meta.original_chars} chars"
    lines = [
        f"Section {meta.key}",
        f"source: {meta.source}",
        f"scope: {meta.scope or 'chat'}",
        f"priority: {meta.priority}{' (protected)' if meta.protected else ''}",
        f"reason: {meta.reason or 'always included when not empty'}",
        f"budget: {state}",
        "",
        text.strip(),
    ]
    return "\n".join(lines)


def context_report(
    planner: RequestPlanner,
    chat: Chat,
    sections: Sequence[ContextSection],
    notes: Sequence[str] = (),
) -> ContextReport:
    """Plan the chat's next request (without the model) and describe it, with the
    extensions' `notes` (`Extensions.report_lines`) at the end."""
    store = planner.store
    plan = planner.plan(chat, sections, tools=True)
    history = store.history(chat.id)
    calibration = store.load_calibration(planner.model)
    compactions, saved = store.compaction_totals(chat.id)
    prefix = plan.messages[0]["content"]
    window = planner.window()
    profile = load_profile(store, planner.model)
    tools_tokens = _tools_tokens(plan)
    return ContextReport(
        chat=chat.key,
        model=model_label(profile),
        context_window=window.tokens,
        window_source=window.source,
        window_warning=server_disagrees(planner.config.llm, profile),
        effective_window=plan.window,
        prefix_chars=len(prefix),
        prefix_tokens=plan.parts["prefix"],
        summary_tokens=plan.parts["summary"],
        history_messages=len(history),
        history_tokens=plan.parts["history"],
        dynamic_tokens=plan.parts["dynamic"],
        newest_tokens=plan.parts["newest"],
        tool_count=len(plan.tools or []),
        tools_tokens=tools_tokens,
        tools_dropped=bool(plan.tools) and not plan.tools_in_prompt,
        tools_compacted=bool(plan.tool_offer and plan.tool_offer.compacted),
        tools_left_out=dict(plan.tool_offer.left_out) if plan.tool_offer else {},
        framing_tokens=plan.tokens - sum(plan.parts.values()) - tools_tokens,
        sections=plan.sections,
        total_tokens=plan.tokens,
        peak_tokens=store.peak_prompt_tokens(chat.id, PEAK_KIND),
        pressure=plan.pressure,
        would_prune=plan.prune.pruned,
        compactions=max(compactions, store.session(chat.id).compaction_count),
        tokens_saved=saved,
        chars_per_token=plan.estimator.chars_per_token,
        calibration_samples=calibration.samples if calibration else 0,
        last_observed_ratio=calibration.last_ratio if calibration else None,
        notes=list(notes),
        **_image_fields(plan, planner),
    )


def _tools_tokens(plan: RequestPlan) -> int:
    """The tool schemas' tokens (0 when the server's template drops them)."""
    return plan.estimator.tools(plan.tools, plan.messages) if plan.tools_in_prompt else 0


def _image_fields(plan: RequestPlan, planner: RequestPlanner) -> dict[str, int]:
    return {
        "image_count": plan.images,
        "image_tokens": plan.image_tokens,
        "image_cap_tokens": cap_image_tokens(planner.config.media),
    }
