"""Memory's plugin: `mnemo memory …`, its benchmarks, and the extension of a running bot."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    import click

    from core.api import Extension
    from core.config import Config
    from core.context.plan import RequestPlanner
    from core.mcp.connection import McpServer
    from core.turn.hooks import Host

# Short help for `mnemo --help`, which lists the commands without importing them.
MEMORY_HELP = "Structured memories of a chat: list, search, add, forget, forgotten, reindex."
LOCOMO_HELP = "Evidence recall cov@5/cov@10 and ranking latency on a LoCoMo file."
BENCH_HELP = "Ranking latency (query embedding included) for one chat of N memories."
RECALL_HELP = "Share of LoCoMo questions whose evidence reaches the model request, end to end."


def register_commands(cli: click.Group) -> None:
    from core.cli.lazy_group import add_lazy_command
    from core.cli.runtime import bench_group

    add_lazy_command(cli, "memory", "memory.cli:memory_group", MEMORY_HELP)
    add_lazy_command(bench_group(cli), "locomo", "memory.bench.cli:bench_locomo", LOCOMO_HELP)
    add_lazy_command(bench_group(cli), "memory", "memory.bench.cli:bench_memory", BENCH_HELP)
    add_lazy_command(bench_group(cli), "recall", "memory.bench.cli:bench_recall", RECALL_HELP)


def extension(host: Host) -> Extension:
    from memory.extension import MemoryExtension
    from memory.files import FileMemory
    from memory.stores import memory_store, recaller

    files = FileMemory(host.files)  # the data dir, or `stored_files` on PostgreSQL
    store = memory_store(host.storage)
    extension = MemoryExtension(host.config, store, files=files, memory_server=memory_server(host))
    extension.recaller = recaller(host.storage, host.config, extension.keeper)

    def window_start(chat_id: int) -> int:
        return host.store.session(chat_id).started_at_message_id

    extension.window_start = window_start
    extension.section_room = partial(dynamic_room, host.config, host.planner)
    extension.recall_cap = partial(recall_cap, host.config, host.planner)
    extension.recall_floor = partial(recall_floor, host.config, host.planner)
    return extension


def memory_server(host: Host) -> Callable[[], McpServer | None]:
    """The running MCP server `[memory] mcp_server` names, found when asked (the MCP
    plugin registers after memory and owns the connection, its restarts and its doctor line)."""
    from core.mcp.extension import McpExtension

    name = host.config.memory.mcp_server

    def lookup() -> McpServer | None:
        for extension in host.extensions:
            if isinstance(extension, McpExtension):
                return next((s for s in extension.servers if s.name == name), None)
        return None

    return lookup


def usable_window(config: Config, planner: RequestPlanner) -> int:
    """The model's window less the room kept for its answer (`effective_window`)."""
    from core.model.profile import effective_window

    return effective_window(planner.window().tokens, config.llm.max_output_tokens)


def dynamic_room(config: Config, planner: RequestPlanner) -> int:
    """Tokens the next request's dynamic sections may take together (`core.context.budget`)."""
    from core.context.budget import section_budget

    usable = usable_window(config, planner)
    budget = section_budget(config, config.context.chars_per_token, usable)
    return min(budget.total_chars, budget.section_chars) // 4


RECALL_SHARES = ((2_048, 0.06), (4_096, 0.15))  # (usable tokens below, share of them) for recall
# (issue 32: the fixed part <= 40% at a 2,048 window; <= 1 compaction per 20 turns at 4,096)


def recall_cap(config: Config, planner: RequestPlanner) -> float:
    """The most tokens the recalled section may take: a small share of a small usable window
    (`RECALL_SHARES`), so that recalled messages do not crowd out the conversation itself;
    no cap of its own on a usable window of 4,096 tokens or more."""
    usable = usable_window(config, planner)
    for below, share in RECALL_SHARES:
        if usable < below:
            return usable * share
    return float("inf")


SMALL_WINDOW_RECALL_FLOOR = 0.75  # of the best hit's score, under the last RECALL_SHARES size
# (a same-day neighbour lent 0.7 of a hit's score, `memory.second_stage.NEIGHBOUR_SHARE`, is
# shown only if it matches on its own; issue 31: bench kv 0.881 -> 0.893, 0.904 with said-once)


def recall_floor(config: Config, planner: RequestPlanner) -> float:
    """The least score, as a share of the best match's, a recalled line needs: on a usable
    window under 4,096 tokens, where every recalled line is new text the next requests
    carry and the window fills in a few turns, only lines near the best match are shown;
    on larger windows every match that fits the budget (0)."""
    usable = usable_window(config, planner)
    return SMALL_WINDOW_RECALL_FLOOR if usable < RECALL_SHARES[-1][0] else 0.0
