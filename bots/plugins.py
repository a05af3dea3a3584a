"""The plugins Mnemo is built from, in registration order: the built-ins, memory, learned
strategies, skills, scheduled tasks, the reflector, MCP servers, sub-agents, web tools, and the
dashboard last (it reads the others). Registration order is injection order. Each plugin
module is light: importing it loads none of its parts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.web import plugin as web_plugin
from core import plugin as default_plugin
from core.mcp import plugin as mcp_plugin
from core.skills import plugin as skills_plugin
from core.subagents import plugin as subagents_plugin
from core.tasks import plugin as tasks_plugin
from core.web_tools import plugin as web_tools_plugin
from memory import plugin as memory_plugin
from memory.strategies import plugin as strategies_plugin
from reflector import plugin as reflector_plugin

if TYPE_CHECKING:
    from core.turn.hooks import Plugin

PLUGINS: tuple[Plugin, ...] = (
    default_plugin,
    memory_plugin,
    strategies_plugin,
    skills_plugin,
    tasks_plugin,
    reflector_plugin,
    mcp_plugin,
    subagents_plugin,
    web_tools_plugin,
    web_plugin,
)
