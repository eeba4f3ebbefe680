"""The log filter: every configured secret becomes ``***`` in a record, exceptions included."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator

import pytest

from bridge.logs import ContextFormatter, JsonFormatter, RedactSecrets, setup_logging


def record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("t", logging.INFO, __file__, 1, msg, args, exc_info)


def test_secrets_in_the_message_and_its_arguments_are_replaced() -> None:
    redact = RedactSecrets(["sekret", "sekret-and-more", "12345"])
    rec = record("token %s and %s", "sekret-and-more", "sekret")
    assert redact.filter(rec) is True
    assert rec.getMessage() == "token *** and ***"
    assert rec.args is None
    short = record("pin 12345")
    redact.filter(short)
    assert short.getMessage() == "pin 12345", "values under six characters are not secrets"


def test_a_record_without_secrets_is_left_alone() -> None:
    rec = record("count %d", 3)
    assert RedactSecrets(["sekret"]).filter(rec) is True
    assert rec.args == (3,) and rec.msg == "count %d"
    empty = record("sekret here")
    assert RedactSecrets([]).filter(empty) is True
    assert empty.getMessage() == "sekret here"


def test_an_exception_text_is_redacted_too() -> None:
    try:
        raise RuntimeError("login with sekret-password failed")
    except RuntimeError as exc:
        rec = record("it failed", exc=exc)
    RedactSecrets(["sekret-password"]).filter(rec)
    assert rec.exc_text is not None
    assert "sekret-password" not in rec.exc_text and "login with *** failed" in rec.exc_text
    assert "sekret-password" not in ContextFormatter().format(rec)
    assert "sekret-password" not in JsonFormatter().format(rec)


def test_a_longer_secret_is_replaced_before_a_shorter_one_inside_it() -> None:
    rec = record("x abcdefgh y")
    RedactSecrets(["bcdefg", "abcdefgh"]).filter(rec)
    assert rec.getMessage() == "x *** y"


def test_each_line_names_its_thread_and_conversation() -> None:
    rec = record("turn done")
    rec.chat_thread, rec.conversation = "slack|C1|1.0", "conv-1"
    line = ContextFormatter("%(levelname)s %(message)s").format(rec)
    assert line == "INFO turn done [chat_thread=slack|C1|1.0 conversation=conv-1]"
    assert ContextFormatter("%(message)s").format(record("plain")) == "plain"


def test_json_lines_carry_the_same_fields() -> None:
    rec = record("turn %s", "done")
    rec.chat_thread = "slack|C1|1.0"
    data = json.loads(JsonFormatter().format(rec))
    assert data["level"] == "INFO" and data["logger"] == "t" and data["message"] == "turn done"
    assert data["chat_thread"] == "slack|C1|1.0" and "conversation" not in data
    assert data["time"].endswith("+00:00")
    try:
        raise ValueError("boom")
    except ValueError as exc:
        failed = record("failed", exc=exc)
    assert "ValueError: boom" in json.loads(JsonFormatter().format(failed))["exception"]


# setup_logging runs inside the CLI process; these call it in-process, so that mutation
# testing sees what it does (and the root logger is put back after each test).


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    noisy = {name: logging.getLogger(name).level for name in NOISY}
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in noisy.items():
        logging.getLogger(name).setLevel(old)


NOISY = (
    "uvicorn.access",
    "uvicorn.error",
    "aiohttp.access",
    "httpx",
    "httpcore",
    "mcp",
    "aiosqlite",
    "sse_starlette",
)
SECRET = "xoxb-1234-very-secret"


def test_setup_logging_redacts_every_secret_and_names_the_thread(
    root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("INFO", json_lines=False, secrets=[SECRET, "matrix-password", "short"])
    [handler] = root_logger.handlers
    assert isinstance(handler, logging.StreamHandler)
    assert root_logger.level == logging.INFO
    log = logging.getLogger("bridge.test")
    log.debug("not shown %s", SECRET)
    log.info(
        "sent with %s and %s (short)",
        SECRET,
        "matrix-password",
        extra={"chat_thread": "slack|C1|1.0", "conversation": "conv-1"},
    )
    [line] = capsys.readouterr().err.splitlines()
    assert SECRET not in line and "matrix-password" not in line
    assert line.endswith(
        " INFO bridge.test: sent with *** and *** (short) "
        "[chat_thread=slack|C1|1.0 conversation=conv-1]"
    )
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO ", line), line


def test_setup_logging_writes_json_lines_without_secrets(
    root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("DEBUG", json_lines=True, secrets=[SECRET])
    assert root_logger.level == logging.DEBUG
    logging.getLogger("bridge.test").debug("café %s", SECRET, extra={"chat_thread": "t1"})
    [line] = capsys.readouterr().err.splitlines()
    assert "café ***" in line, "non-ASCII text stays readable in the JSON line"
    data = json.loads(line)
    assert data["message"] == "café ***"
    assert data["level"] == "DEBUG" and data["chat_thread"] == "t1"
    # Libraries that would print URLs with tokens or chat content stay at warnings.
    for name in NOISY:
        assert logging.getLogger(name).level == logging.WARNING, name
    logging.getLogger("httpx").info("GET https://x/?token=%s", SECRET)
    assert capsys.readouterr().err == ""


def test_setup_logging_keeps_noisy_libraries_at_a_stricter_level_when_asked(
    root_logger: logging.Logger,
) -> None:
    setup_logging("ERROR", json_lines=False, secrets=[])
    assert root_logger.level == logging.ERROR
    for name in NOISY:
        assert logging.getLogger(name).level == logging.ERROR, name
    setup_logging("WARNING", json_lines=False, secrets=[])
    assert len(root_logger.handlers) == 1, "a second setup replaces the handler"
