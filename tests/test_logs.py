"""The log filter: every configured secret becomes ``***`` in a record, exceptions included."""

from __future__ import annotations

import logging

from bridge.logs import ContextFormatter, JsonFormatter, RedactSecrets


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
    import json

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
