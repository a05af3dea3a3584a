"""Logging for the `mnemo` process: configured once at the entry point, the HTTP client
loggers quieted. Imports nothing but `logging`, so every command can call it without
loading the runtime."""

from __future__ import annotations

import logging

PROGRESS_LOGGERS = ("memory.onnx_export",)
HTTP_LOGGERS = (
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "openai",
    "telegram",
    "discord",
    "apscheduler",
    "sentence_transformers",
    "urllib3",
)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in HTTP_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, getattr(logging, level)))
    for name in PROGRESS_LOGGERS:  # a slow first start says what it does, whatever the level
        logging.getLogger(name).setLevel(min(logging.INFO, getattr(logging, level)))
