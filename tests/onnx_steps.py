"""The ONNX export's slow steps (torch export, fuse, quantise), made for real once per test run
and copied after, by every process of the run: the xdist workers (`tests/memory/test_onnx.py`)
and the `mnemo` processes they start (`tests/e2e/test_startup.py`'s cold start, through
`python -m tests.onnx_steps ARGS`, which is `python -m bots.cli ARGS` with the steps wrapped).

Each step's output is kept in the run's cache (`MNEMO_TEST_RUN_CACHE`, removed at the end of
the run) under a key made of what decides it: the model's weights and the attention for an
export, the input file's bytes for a fuse or a quantise, and always the export code
(`memory/onnx_export.py`) and the versions of the libraries that do the work. The first
process to need a step makes it under a lock; the others wait for it and copy its output,
written as the steps write theirs (whole or not at all). What calls the steps (what is made,
when, what is said, the checks of the result) runs as it does without the copies.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from memory import onnx_export

RUN_CACHE = "MNEMO_TEST_RUN_CACHE"
LIBRARIES = ("torch", "transformers", "sentence-transformers", "onnx", "onnxruntime")
STEPS = ("export", "fuse", "quantize")


def steps_folder() -> Path:
    """Where this run's step outputs are kept (made on first use)."""
    folder = Path(os.environ[RUN_CACHE]) / "onnx-steps"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@cache
def code_key() -> str:
    """The export code's bytes and the libraries' versions: any change makes new outputs."""
    digest = hashlib.sha256(Path(onnx_export.__file__).read_bytes())
    for name in LIBRARIES:
        try:
            digest.update(f"{name}=={metadata.version(name)};".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} missing;".encode())
    return digest.hexdigest()


def weights_key(st_model: Any) -> str:
    """The transformer's weights and attention implementation (~0.2 CPU-s for MiniLM)."""
    bert = onnx_export.check_pipeline(st_model)
    digest = hashlib.sha256(str(getattr(bert.config, "_attn_implementation", "")).encode())
    for name, tensor in sorted(bert.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def file_key(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_into_place(source: Path, target: Path) -> None:
    """As the steps write their output: whole or not at all (a copy, then a rename)."""
    partial = target.with_name(target.name + ".copy")
    shutil.copyfile(source, partial)
    os.replace(partial, target)


def made_once(name: str, key: str, target: Path, make: Callable[[], None]) -> None:
    """`make()` writes `target`, unless an output kept under `name` and `key` is copied
    there instead; the first process to get here makes and keeps it, the others wait."""
    kept = steps_folder() / f"{name}-{hashlib.sha256((key + code_key()).encode()).hexdigest()}"
    with open(kept.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.is_file():
            make()
            copy_into_place(target, kept)
            return
    copy_into_place(kept, target)


def wrapped_steps() -> dict[str, Callable[..., None]]:
    """`onnx_export`'s export, fuse and quantize (as they are now), each made once per run."""
    export, fuse, quantize = onnx_export.export, onnx_export.fuse, onnx_export.quantize

    def export_once(st_model: Any, path: Path, attention: str = "") -> None:
        key = f"{weights_key(st_model)}-{attention or 'own'}"
        made_once("export", key, path, lambda: export(st_model, path, attention))

    def fuse_once(path: Path, target: Path, config: Any) -> None:
        shape = f"{getattr(config, 'num_attention_heads', 0)}-{getattr(config, 'hidden_size', 0)}"
        made_once("fuse", f"{file_key(path)}-{shape}", target, lambda: fuse(path, target, config))

    def quantize_once(path: Path, target: Path) -> None:
        made_once("quantize", file_key(path), target, lambda: quantize(path, target))

    return {"export": export_once, "fuse": fuse_once, "quantize": quantize_once}


@contextmanager
def steps_made_once() -> Iterator[None]:
    """Within the block, `onnx_export`'s steps are made once per run (then put back)."""
    originals = {name: getattr(onnx_export, name) for name in STEPS}
    for name, step in wrapped_steps().items():
        setattr(onnx_export, name, step)
    try:
        yield
    finally:
        for name, step in originals.items():
            setattr(onnx_export, name, step)


def main() -> None:
    """`python -m bots.cli ARGS` with the steps made once per run."""
    from bots import cli

    sys.argv[0] = "mnemo"
    with steps_made_once():
        cli.main()


if __name__ == "__main__":
    main()
