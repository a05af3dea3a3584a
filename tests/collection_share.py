"""Each xdist worker imports the test modules from its own share of the list first, so that in
a fresh clone one worker, not every one, compiles a module and rewrites its asserts.

Every worker collects the whole suite. In a fresh clone (no `__pycache__` yet, and a new venv
whose packages pip installed without bytecode) the workers start together and import the
modules in the same order, so each compiles every module and pytest rewrites every test
module's asserts in each (~14 CPU-s a worker, 4 workers at once). Here worker k of n begins
at the k-th n-th of the sorted test modules and goes round: each writes the bytecode of its
share while the others write theirs, and finds theirs written when it gets there. The
modules are imported with pytest's own `import_path` and import mode, as collecting them
does, so collection then finds the same module objects; a module that fails to import here
is left to the collection to import again and report.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest
from _pytest.outcomes import OutcomeException


def modules_to_collect(config: pytest.Config) -> list[Path]:
    """The test modules under `testpaths`, sorted as collection walks them."""
    found: list[Path] = []
    for name in config.getini("testpaths") or ["."]:
        found.extend((config.rootpath / name).rglob("test_*.py"))
    return sorted(path for path in found if "__pycache__" not in path.parts)


def rotated(items: list[Path], worker: int, workers: int) -> list[Path]:
    """`items` starting at worker `worker`'s share of `workers`, then round to the start."""
    start = len(items) * worker // max(1, workers)
    return items[start:] + items[:start]


def import_from_own_share(config: pytest.Config) -> None:
    """On an xdist worker that writes bytecode: import every test module, from this
    worker's share on (`rotated`); elsewhere nothing."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers < 2 or sys.dont_write_bytecode:
        return
    from _pytest.pathlib import import_path

    mode = config.getoption("importmode")
    namespaces = bool(config.getini("consider_namespace_packages"))
    for path in rotated(modules_to_collect(config), int(worker[2:]), workers):
        # a module that raises (or skips) is imported again by the collection, which says why
        with contextlib.suppress(Exception, OutcomeException):
            import_path(path, mode=mode, root=config.rootpath,
                        consider_namespace_packages=namespaces)  # fmt: skip
