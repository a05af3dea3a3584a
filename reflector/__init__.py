"""The reflector: a scheduled worker that distils durable facts from a chat's unseen messages.

`reflection.Reflector` runs a pass; `scheduler.ReflectorService` runs passes on an interval;
`extension.ReflectorExtension` plugs both into the bot; `commands` holds the CLI;
`playbook.StrategyCurator` lets the same model call curate learned strategies.
"""
