"""From the config to agy's launch settings: the one translation ``run``, ``console`` and
``doctor`` share (its own module: the doctor imports it without the core and the chats)."""

from __future__ import annotations

from bridge.agy.launch import LaunchSettings
from bridge.config import Config


def launch_settings(config: Config, command: list[str] | None = None) -> LaunchSettings:
    agy = config.agy
    return LaunchSettings(
        command=tuple(command or agy.command),
        skip_permissions=agy.skip_permissions,
        mode=agy.mode,
        sandbox=agy.sandbox,
        extra_args=tuple(agy.extra_args),
        env=dict(agy.env),
        git_name=config.identity.name,
        git_email=config.identity.email,
        turn_timeout=agy.turn_timeout,
        secret_env_names=tuple(config.secret_env_names()),
        secret_values=tuple(config.secret_values()),
        pass_env=tuple(agy.pass_env),
    )
