"""Logging: every line names its thread and conversation; secrets never reach a log line."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

CONTEXT_FIELDS = ("chat_thread", "conversation")


class RedactSecrets(logging.Filter):
    """Replace every known secret value in a record's final message with ``***``."""

    def __init__(self, secrets: Iterable[str]):
        super().__init__()
        self.secrets = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        redacted = message
        for secret in self.secrets:
            redacted = redacted.replace(secret, "***")
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            for secret in self.secrets:
                record.exc_text = record.exc_text.replace(secret, "***")
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


class ContextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(
            f"{name}={value}"
            for name in CONTEXT_FIELDS
            if (value := getattr(record, name, None)) is not None
        )
        return f"{line} [{context}]" if context else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            if (value := getattr(record, name, None)) is not None:
                data[name] = value
        if record.exc_info or record.exc_text:
            data["exception"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return json.dumps(data, ensure_ascii=False)


def setup_logging(level: str, *, json_lines: bool, secrets: Iterable[str]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactSecrets(secrets))
    handler.setFormatter(
        JsonFormatter()
        if json_lines
        else ContextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party loggers that would print URLs (with tokens in them) or request bodies.
    # aiosqlite and sse_starlette would log chat content (message texts, MCP results).
    for noisy in (
        "uvicorn.access",
        "uvicorn.error",
        "aiohttp.access",
        "httpx",
        "httpcore",
        "mcp",
        "aiosqlite",
        "sse_starlette",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
