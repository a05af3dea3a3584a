"""Scheduled tasks and reminders: `schedule_task` and friends, the `scheduled_tasks` table,
the runner that fires due tasks exactly once, `mnemo tasks` and `mnemo bench tasks`."""
