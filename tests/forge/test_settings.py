"""``[forge]`` and ``[workspaces.forge]`` (bridge/forge_settings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import ConfigError, build_config


def test_workspace_forge_overrides_the_default_key_by_key() -> None:
    config = build_config(
        {
            "forge": {"kind": "github", "token": "tok-global-123", "repo": "team/app"},
            "workspaces": [
                {"path": "/srv/a", "worktree": True, "forge": {"repo": "team/other"}},
                {"path": "/srv/b", "channel": "C1"},
            ],
        },
        {},
    )
    first = config.forge_for(config.workspaces[0])
    assert first is not None
    assert first.repo == "team/other" and first.merge_method == "squash"
    assert first.token is not None and first.token.get_secret_value() == "tok-global-123"
    second = config.forge_for(config.workspaces[1])
    assert second is not None and second.repo == "team/app"
    assert first.api == "https://api.github.com"


def test_no_forge_is_none() -> None:
    config = build_config({"workspaces": [{"path": "/srv/a"}]}, {})
    assert config.forge_for(config.workspaces[0]) is None
    assert config.forge_for(None) is None


def test_token_from_environment_is_a_secret_agy_never_gets() -> None:
    config = build_config(
        {"forge": {"kind": "gitlab", "webhook_secret": "hook-secret-1"}},
        {"AGY_BRIDGE_FORGE_TOKEN": "glpat-from-env-1"},
    )
    assert config.forge is not None and config.forge.token is not None
    assert config.forge.token.get_secret_value() == "glpat-from-env-1"
    assert "glpat-from-env-1" in config.secret_values()
    assert "hook-secret-1" in config.secret_values()
    assert "AGY_BRIDGE_FORGE_TOKEN" in config.secret_env_names()
    assert config.forge.api == "https://gitlab.com/api/v4"


def test_environment_token_reaches_workspace_forges_without_a_default() -> None:
    config = build_config(
        {"workspaces": [{"path": "/srv/a", "forge": {"repo": "team/app"}}]},
        {"AGY_BRIDGE_FORGE_TOKEN": "ghp-env-2"},
    )
    forge = config.forge_for(config.workspaces[0])
    assert forge is not None and forge.token is not None
    assert forge.token.get_secret_value() == "ghp-env-2"


@pytest.mark.parametrize(
    "table",
    [
        {"kind": "bitbucket"},
        {"repo": "no-slash"},
        {"api_url": "ftp://x"},
        {"merge_method": "fast"},
        {"tokn": "typo"},
    ],
)
def test_bad_forge_refused_naming_the_key(table: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="forge"):
        build_config({"forge": table}, {})


def test_example_config_still_loads(tmp_path: Path) -> None:
    assert build_config({"forge": {}}, {}).forge is not None
