"""ReflectorService: runs reflector passes on an interval with APScheduler 3's AsyncIOScheduler.

One job, `max_instances=1` and `coalesce=True`, so passes never overlap and missed runs
collapse into one. On shutdown the scheduler stops firing and a pass in flight is
awaited (shielded from the cancellation), so no model answer is thrown away half-stored.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from reflector.reflection import PassReport, Reflector

logger = logging.getLogger(__name__)

FIRST_RUN_MAX_DELAY_S = 30.0
JOB_ID = "reflector-pass"


class ReflectorService:
    """A `core.turn.extensions.Service`: `run()` until cancelled."""

    name = "reflector"

    def __init__(self, reflector: Reflector, interval_mins: float) -> None:
        self.reflector = reflector
        self.interval_s = interval_mins * 60
        self.passes = 0
        self._inflight: asyncio.Task[PassReport] | None = None

    async def run(self) -> None:
        # Imported here: `mnemo chat` builds this service and never runs it.
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        scheduler = AsyncIOScheduler(timezone="UTC")
        first = datetime.now(scheduler.timezone) + timedelta(
            seconds=min(self.interval_s, FIRST_RUN_MAX_DELAY_S)
        )
        scheduler.add_job(
            self._fire,
            "interval",
            seconds=self.interval_s,
            id=JOB_ID,
            max_instances=1,
            coalesce=True,
            next_run_time=first,
            misfire_grace_time=None,
        )
        scheduler.start()
        logger.info("reflector scheduled every %.3g minutes", self.interval_s / 60)
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            scheduler.shutdown(wait=False)
            await asyncio.sleep(0)  # let the scheduler's shutdown callback run
            await self._drain()

    async def _drain(self) -> None:
        """Wait for a pass in flight to finish (its memories and cursor commit together)."""
        task = self._inflight
        if task is None or task.done():
            return
        logger.info("waiting for the reflector pass in flight to finish")
        try:
            await task
        except Exception:
            logger.exception("the reflector pass in flight failed")

    async def _fire(self) -> None:
        """The scheduled job: start a pass as its own task and wait for it, shielded."""
        task = asyncio.create_task(self._pass(), name="reflector-pass")
        self._inflight = task
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            # The scheduler is shutting down; `run()` drains the pass. Not a job error.
            logger.debug("reflector job cancelled; the pass in flight is left to finish")

    async def _pass(self) -> PassReport:
        try:
            report = await self.reflector.run_pass()
        except Exception:  # the job boundary: log it, the next interval tries again
            logger.exception("reflector pass failed")
            return PassReport()
        finally:
            self.passes += 1
        for line in report.lines():
            logger.debug("reflector: %s", line)
        return report
