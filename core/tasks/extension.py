"""Scheduled tasks in a running bot: the tools `schedule_task`, `list_tasks` and
`cancel_task`, the commands /tasks, /cancel N and /timezone, the runner service, and the
chat's tasks in `/forgetme` and `mnemo chat export`.

Who may schedule: anyone in a private chat; in a group, as for the chat's notes
(`memory.notes`), an admin (the platform says so), anyone in a control chat, the bot's
owner, or a user on the channel's allow-list. A `run` task's turn may not schedule more.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from core.api import (
    Chat,
    ChatDataSection,
    Check,
    Command,
    Extension,
    Service,
    Tool,
    TurnContext,
)
from core.config import Config
from core.errors import InputError, ToolError
from core.storage.database import Database
from core.tasks.runner import TaskRunner, at, task_of_run
from core.tasks.schedule import Schedule, format_local, next_run, parse_when, zone
from core.tasks.task_store import NewTask, ScheduledTask, TaskStore
from core.turn.outgoing import Outgoing

GROUP_KINDS = ("group", "channel", "thread")
MODES = ("remind", "run")
MAX_TEXT_CHARS = 2_000
CHAT_TASKS = "scheduled tasks"
OVERDUE_S = 60.0
WHEN_HELP = (
    "When: an ISO 8601 time (2026-12-24T18:00, read in the chat's time zone), a relative"
    " time ('in 30 seconds', 'in 2 hours', 'tomorrow at 9'), 'every day at 8:30',"
    " 'every monday at 8', 'every 2 hours', or a five-field cron expression ('0 8 * * 1-5')"
    " which repeats."
)
GROUP_REFUSAL = (
    "in a group only an admin, the bot's owner or an allowed user may schedule tasks;"
    " nothing was scheduled"
)


def may_schedule(config: Config, turn: TurnContext) -> bool:
    """The sender may schedule (and cancel others' tasks, and set the time zone) here."""
    inbound = turn.inbound
    if inbound.chat_kind not in GROUP_KINDS:
        return True
    operator = bool(inbound.sender_id) and (
        f"{inbound.channel}:{inbound.sender_id}" in config.agent.control_chats
    )
    allowed: list[int] = []
    if inbound.channel == "telegram":
        allowed = config.telegram.allowed_user_ids
    elif inbound.channel == "discord":
        allowed = config.discord.allowed_user_ids
    listed = inbound.sender_id.isdigit() and int(inbound.sender_id) in allowed
    return inbound.sender_is_admin or turn.is_control_chat or operator or listed


def describe_task(task: ScheduledTask) -> str:
    """One line of /tasks: `#3 remind, every day at …: text (next 2026-…)`."""
    schedule = Schedule(task.schedule_kind, task.expression, task.timezone)  # type: ignore[arg-type]
    next_run = format_local(at(task.next_run_at), task.timezone) if task.next_run_at else "-"
    state = "" if task.status == "active" else f" [{task.status}]"
    text = task.text if len(task.text) <= 120 else task.text[:117] + "…"
    return f"#{task.id} {task.mode}, {schedule.describe()}{state}: {text} (next: {next_run})"


def describe_tasks(tasks: list[ScheduledTask]) -> str:
    if not tasks:
        return "No scheduled tasks. Ask me, e.g. 'remind me in 2 hours to call Ann'."
    lines = [f"Scheduled tasks ({len(tasks)}):", *(describe_task(t) for t in tasks)]
    return "\n".join(lines + ["Cancel one with /cancel N."])


class TasksExtension(Extension):
    name = "tasks"

    def __init__(self, config: Config, db: Database, outgoing: Outgoing) -> None:
        self.config = config
        self.settings = config.tasks
        self.db = db
        self.tasks = TaskStore(db)
        self.runner = TaskRunner(config.tasks, db, outgoing)
        self.clock = time.time

    def tools(self) -> list[Tool]:
        if not self.settings.enabled:
            return []
        schedule = {
            "when": {"type": "string", "description": WHEN_HELP},
            "text": {
                "type": "string",
                "description": "remind: the reminder's text; run: the prompt to run then.",
            },
            "mode": {
                "type": "string",
                "enum": list(MODES),
                "description": "remind (default): send the text as a reminder; run: answer"
                " the text as a prompt at that time, with this chat's tools.",
            },
        }
        task_id = {"id": {"type": "integer", "description": "The task's number (#N)."}}
        return [
            Tool("schedule_task", "Schedule a reminder or a prompt to run later (or"
                 " repeatedly) in this chat.", self._schedule,
                 {"type": "object", "properties": schedule, "required": ["when", "text"]}),
            Tool("list_tasks", "List this chat's scheduled tasks.", self._list),
            Tool("cancel_task", "Cancel one of this chat's scheduled tasks.", self._cancel,
                 {"type": "object", "properties": task_id, "required": ["id"]}),
        ]  # fmt: skip

    def commands(self) -> list[Command]:
        if not self.settings.enabled:
            return []
        return [
            Command("tasks", "list this chat's scheduled tasks", self._tasks_command),
            Command("cancel", "cancel scheduled task N: /cancel N", self._cancel_command),
            Command("timezone", "show or set the chat's time zone: /timezone Europe/Berlin",
                    self._timezone_command),
        ]  # fmt: skip

    def help_lines(self) -> list[str]:
        if not self.settings.enabled:
            return []
        return ["remind me in 2 hours to …, every monday at 8 send me … (scheduled tasks)"]

    def services(self) -> list[Service]:
        return [self.runner] if self.settings.enabled else []

    async def checks(self) -> list[Check]:
        """One `mnemo doctor` line: how many tasks, and a warning for paused or overdue ones
        (overdue: due over a minute ago and not fired, e.g. no `mnemo run` is running)."""
        if not self.settings.enabled:
            return []
        counts = self.tasks.status_counts(self.clock() - OVERDUE_S)
        detail = f"{counts['active']} active, {counts['paused']} paused"
        if counts["overdue"]:
            detail += f", {counts['overdue']} overdue (is `mnemo run` running?)"
        healthy = not counts["paused"] and not counts["overdue"]
        return [Check("scheduled tasks", healthy, detail, fatal=False)]

    async def after_turn(self, turn: TurnContext) -> None:
        task_id = task_of_run(turn.inbound.message_id)
        if task_id is not None:
            self.tasks.run_worked(task_id)

    def chat_data(self, chat: Chat) -> dict[str, int]:
        return {CHAT_TASKS: self.tasks.count_for_chat(chat.id)}

    def export_chat(self, chat: Chat) -> list[ChatDataSection]:
        tasks = self.tasks.for_chat(chat.id, open_only=False)
        if not tasks:
            return []
        records = [task_record(task) for task in tasks]
        markdown = "\n".join(f"- {describe_task(task)}" for task in tasks)
        return [ChatDataSection("scheduled_tasks", "Scheduled tasks", records, markdown)]

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        return {CHAT_TASKS: self.tasks.delete_for_chat(chat.id)}

    # -- tools -----------------------------------------------------------------------------

    def timezone_of(self, chat: Chat) -> str:
        """The chat's own time zone (/timezone) where set; else `[tasks] default_timezone`
        when set; else `[memory] timezone` (the reflector's dates read the same)."""
        own = self.tasks.timezone_of(chat.id)
        return own or self.settings.default_timezone or self.config.memory.timezone

    def schedule(self, turn: TurnContext, when: str, text: str, mode: str) -> ScheduledTask:
        """Check everything, then store the task (nothing is stored when a check fails)."""
        if task_of_run(turn.inbound.message_id) is not None:
            raise ToolError("a scheduled task's run cannot schedule further tasks")
        if not may_schedule(self.config, turn):
            raise ToolError(GROUP_REFUSAL)
        if mode not in MODES:
            raise ToolError(f"mode must be remind or run, not {mode!r}")
        text = text.strip()
        if not text or len(text) > MAX_TEXT_CHARS:
            raise ToolError(f"text must be 1 to {MAX_TEXT_CHARS} characters")
        now = datetime.fromtimestamp(self.clock(), UTC)
        parsed = parse_when(when, self.timezone_of(turn.chat), now, self.settings.min_interval_s)
        first = _first_run(parsed, now)
        inbound = turn.inbound
        new = NewTask(inbound.sender_id, inbound.sender_name, mode, text, parsed.kind,
                      parsed.expression, parsed.timezone, chat_id=turn.chat.id,
                      next_run_at=first)  # fmt: skip
        with self.db.transaction():
            if self.tasks.active_count(turn.chat.id) >= self.settings.max_active_per_chat:
                raise ToolError(
                    f"this chat already has {self.settings.max_active_per_chat} active tasks"
                    " (the limit); cancel one first"
                )
            task = self.tasks.add(new)
        self.runner.nudge()
        return task

    async def _schedule(self, turn: TurnContext, arguments: dict[str, Any]) -> str:
        when = str(arguments.get("when") or "")
        mode = str(arguments.get("mode") or "remind").strip().lower()
        task = self.schedule(turn, when, str(arguments.get("text") or ""), mode)
        return f"scheduled: {describe_task(task)}"

    async def _list(self, turn: TurnContext, arguments: dict[str, Any]) -> str:
        return describe_tasks(self.tasks.for_chat(turn.chat.id))

    def cancel(self, turn: TurnContext, task_id: int) -> str:
        task = self.tasks.get(task_id)
        if task is None or task.chat.id != turn.chat.id or task.status not in ("active", "paused"):
            raise ToolError(f"no open task #{task_id} in this chat (see /tasks)")
        mine = bool(turn.inbound.sender_id) and task.creator_id == turn.inbound.sender_id
        if not mine and not may_schedule(self.config, turn):
            raise ToolError("only who scheduled it or a group admin may cancel it")
        if not self.tasks.cancel(task_id, turn.chat.id):
            raise ToolError(f"task #{task_id} was already finished or cancelled")
        return f"cancelled task #{task_id} ({task.text[:80]})"

    async def _cancel(self, turn: TurnContext, arguments: dict[str, Any]) -> str:
        task_id = arguments.get("id")
        if not isinstance(task_id, int) or isinstance(task_id, bool):
            raise ToolError("id must be a task number")
        return self.cancel(turn, task_id)

    # -- commands --------------------------------------------------------------------------

    async def _tasks_command(self, turn: TurnContext, args: str) -> str:
        text = describe_tasks(self.tasks.for_chat(turn.chat.id))
        return f"{text}\nTime zone: {self.timezone_of(turn.chat)}"

    async def _cancel_command(self, turn: TurnContext, args: str) -> str:
        number = args.strip().lstrip("#")
        if not number.isdigit():
            return "Usage: /cancel N (the task's number in /tasks)"
        try:
            return self.cancel(turn, int(number))
        except ToolError as exc:
            return f"Not cancelled: {exc}"

    async def _timezone_command(self, turn: TurnContext, args: str) -> str:
        name = args.strip()
        if not name:
            current = self.timezone_of(turn.chat)
            return f"This chat's time zone: {current}. Set it: /timezone Europe/Berlin"
        if not may_schedule(self.config, turn):
            return "In a group only an admin, the bot's owner or an allowed user may set it."
        try:
            key = zone(name).key
        except InputError as exc:
            return f"Not changed: {exc}"
        self.tasks.set_timezone(turn.chat.id, key)
        return f"This chat's time zone is now {key}; new tasks' times are read in it."


def _first_run(schedule: Schedule, now: datetime) -> float:
    first = next_run(schedule, now)
    if first is None:
        raise InputError("that time is in the past; give a time in the future")
    return first.timestamp()


def task_record(task: ScheduledTask) -> dict[str, Any]:
    return {
        "id": task.id, "mode": task.mode, "text": task.text, "status": task.status,
        "schedule_kind": task.schedule_kind, "expression": task.expression,
        "timezone": task.timezone, "next_run_at": task.next_run_at, "runs": task.runs,
        "failures": task.failures, "creator_id": task.creator_id,
        "creator_name": task.creator_name, "created_at": task.created_at,
    }  # fmt: skip
