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
