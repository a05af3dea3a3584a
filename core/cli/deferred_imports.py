"""Packages our dependencies import but Mnemo's commands never use, run on first use.

httpcore (under httpx, and httpcore2 under the MCP SDK's httpx2) imports `trio` whenever it
is installed (it is, for Selenium) only to be ready to run under it: ~100 ms of every start.
httpx imports its own command line, and with it `rich` and `pygments`, whenever those are
installed. `defer_unused_imports()` (called once by the `mnemo` entry point) makes importing
those packages cheap: the import gives the real module object, with its `__spec__`,
`__path__` and `__file__`, and its code runs the first time anything reads a name from it.
Code that uses them sees no difference; code that only imports them pays nothing.

Not `importlib.util.LazyLoader`: on Python 3.11 a second `import trio` reads `__spec__`,
which makes a LazyLoader module run at once (httpcore imports trio twice).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

DEFERRED = ("trio", "rich", "pygments")  # and their submodules
_running = threading.RLock()


class DeferredModule(ModuleType):
    """A module whose code has not run yet: reading a name it lacks runs it first."""

    def __getattr__(self, name: str) -> Any:
        with _running:
            if type(self) is DeferredModule:
                run_deferred(self)
        return ModuleType.__getattribute__(self, name)


def run_deferred(module: ModuleType) -> None:
    """Run the module's code now (as its import would have); on failure it leaves
    `sys.modules`, as a failed import does."""
    spec = module.__spec__
    assert spec is not None and isinstance(spec.loader, DeferringLoader)
    loader = spec.loader.loader
    spec.loader = module.__loader__ = loader
    module.__class__ = ModuleType
    try:
        loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise


class DeferringLoader(importlib.abc.Loader):
    """Makes the module as `loader` would, and leaves running its code for later."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__class__ = DeferredModule


class DeferringFinder(importlib.abc.MetaPathFinder):
    """Finds what the other finders find; the deferred packages get a `DeferringLoader`."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] not in DEFERRED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if isinstance(spec.loader, importlib.machinery.SourceFileLoader):
                spec.loader = DeferringLoader(spec.loader)
            return spec
        return None


def defer_unused_imports() -> None:
    """Put the deferring finder first in `sys.meta_path` (once; modules imported before
    stay as they are)."""
    if not any(isinstance(finder, DeferringFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, DeferringFinder())
