"""The dashboard's tasks page: every chat's scheduled tasks, and a cancel button that needs
the session's CSRF token (on both engines)."""

from __future__ import annotations

from core.api import Inbound, TurnContext
from core.tasks.extension import TasksExtension
from core.tasks.task_store import TaskStore
from tests.bots.web.conftest import ON_BOTH_ENGINES, ORIGIN, Site

pytestmark = ON_BOTH_ENGINES


async def test_the_tasks_page_lists_and_cancels_with_the_csrf_token(site: Site) -> None:
    [tasks] = [e for e in site.runtime.extensions if isinstance(e, TasksExtension)]
    turn = TurnContext(site.ann, Inbound("terminal", "ann", "hi", "u-ann", "Ann"))
    task = tasks.schedule(turn, "every day at 7:15", "feed Miso", "remind")
    await site.login()
    page = await site.client.get("/tasks")
    assert page.status_code == 200
    assert "feed Miso" in page.text and "cron &#39;15 7 * * *&#39;" in page.text
    path = f"/tasks/{task.id}/cancel"
    stale = await site.client.post(path, data={"csrf": "stale"}, headers={"Origin": ORIGIN})
    assert stale.status_code == 403
    assert TaskStore(site.runtime.storage.database).for_chat(site.ann.id) != []
    answer = await site.post(path)
    assert answer.status_code == 303 and answer.headers["location"] == f"/tasks?cancelled={task.id}"
    after = await site.client.get(answer.headers["location"])
    assert f"Cancelled task #{task.id}." in after.text and "No scheduled tasks." in after.text
    assert TaskStore(site.runtime.storage.database).for_chat(site.ann.id) == []
    again = await site.post(path)
    assert again.status_code == 404
