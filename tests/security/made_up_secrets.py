"""Made-up secrets of every kind the bridge holds in its config, for the tests that look for
them where they must not be (agy's environment, the log, the chat)."""

from __future__ import annotations

import secrets
from typing import Any


def secret(prefix: str) -> str:
    """A fresh value shaped like the real one (its prefix), random enough to find anywhere."""
    return f"{prefix}{secrets.token_hex(12)}"


def config_secrets() -> dict[tuple[str, str], str]:
    """One of each secret in the config: (section, key) -> value."""
    return {
        ("slack", "bot_token"): secret("xoxb-config-"),
        ("slack", "app_token"): secret("xapp-config-"),
        ("slack", "signing_secret"): secret("signing-config-"),
        ("matrix", "access_token"): secret("syt_config_"),
        ("matrix", "password"): secret("matrix-pw-config-"),
    }


def config_with(
    found: dict[tuple[str, str], str], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Config sections holding ``found`` (with a Matrix account that goes nowhere), on top of
    ``extra``."""
    config: dict[str, Any] = dict(extra or {})
    for (section, key), value in found.items():
        config.setdefault(section, {})[key] = value
    config["matrix"] |= {"homeserver": "http://127.0.0.1:9", "user_id": "@bot:localhost"}
    return config
