from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import ConfigError, build_config, load_config


def test_defaults_are_usable() -> None:
    config = build_config({}, environ={})
    assert config.agy.command == ["agy"]
    assert config.agy.skip_permissions is True
    assert not config.slack.configured and not config.matrix.configured


def test_unknown_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[agy]\ncomand = ["agy"]\n')
    with pytest.raises(ConfigError, match=r"agy\.comand"):
        load_config(path, environ={})


def test_bad_value_is_named() -> None:
    with pytest.raises(ConfigError, match=r"agy\.max_processes"):
        build_config({"agy": {"max_processes": 0}}, environ={})


def test_secrets_from_environment_win_and_are_hidden() -> None:
    config = build_config(
        {"slack": {"bot_token": "xoxb-file"}},
        environ={"SLACK_BOT_TOKEN": "xoxb-env-secret", "MATRIX_PASSWORD": "hunter22"},
    )
    assert config.slack.bot_token is not None
    assert config.slack.bot_token.get_secret_value() == "xoxb-env-secret"
    assert "xoxb-env-secret" not in repr(config)
    assert set(config.secret_values()) == {"xoxb-env-secret", "hunter22"}


def test_relative_data_dir_is_relative_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[bridge]\ndata_dir = "state"\n')
    assert load_config(path, environ={}).bridge.data_dir == tmp_path / "state"


def test_a_config_knows_its_file_and_no_key_of_the_file_can_say_otherwise(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.toml"
    # The sandbox hides the config's file: the file itself must not be able to name another.
    path.write_text('[bridge]\ndata_dir = "state"\n')
    config = load_config(tmp_path / "." / "c.toml", environ={})
    assert config.source == path.resolve()
    assert load_config(None, environ={}).source is None
    assert build_config({}, {}).source is None
    with pytest.raises(ConfigError):
        build_config({"source": str(path), "_source": str(path)}, {})


def test_api_url_gets_its_trailing_slash() -> None:
    config = build_config({"slack": {"api_url": "http://127.0.0.1:1/api"}}, environ={})
    assert config.slack.api_url == "http://127.0.0.1:1/api/"


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[agy\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path, environ={})


def test_two_default_workspaces_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="only one"):
        build_config({"workspaces": [{"path": "/a"}, {"path": "/b"}]}, environ={})


def test_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[1] / "config.example.toml"
    config = load_config(example, environ={})
    assert config.agy.max_processes >= 1


def test_the_example_lists_the_default_login_entries() -> None:
    example = Path(__file__).resolve().parents[1] / "config.example.toml"
    assert load_config(example, environ={}).agy.login_entries == build_config({}).agy.login_entries


@pytest.mark.parametrize("entry", ["/etc/shadow", "../other", "a/../../b", ""])
def test_a_login_entry_outside_the_state_directory_is_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match="login_entries"):
        build_config({"agy": {"login_entries": [entry]}}, environ={})


def test_an_old_glob_rule_is_refused_with_its_replacement() -> None:
    with pytest.raises(ConfigError, match=r"approvals.allow_commands.*`git diff\*`.*`git diff \*`"):
        build_config({"approvals": {"allow_commands": ["git diff*"]}}, environ={})
    with pytest.raises(ConfigError, match=r"approvals\.allow_hosts"):
        build_config({"approvals": {"allow_hosts": ["https://x.test/"]}}, environ={})
    ok = build_config(
        {"approvals": {"allow_commands": ["git diff *"], "allow_hosts": ["*.Python.org"]}},
        environ={},
    )
    assert ok.approvals.allow_hosts == ["*.python.org"]


def test_option_tables_an_operator_adds_are_read_at_start() -> None:
    with pytest.raises(ConfigError, match=r"approvals\.options.*`mytool`.*`o=write`"):
        build_config({"approvals": {"options": {"mytool": "o=write"}}}, environ={})
    ok = build_config({"approvals": {"options": {"mytool": "-v -o=write"}}}, environ={})
    assert ok.approvals.options == {"mytool": "-v -o=write"}


def test_web_settings_go_together() -> None:
    with pytest.raises(ConfigError, match="trusted_header and trusted_platform"):
        build_config({"web": {"trusted_header": "X-User"}}, environ={})
    with pytest.raises(ConfigError, match="public_url"):
        build_config({"web": {"public_url": "agy.example.org"}}, environ={})
    web = build_config({"web": {"enabled": True}}, environ={}).web
    assert (web.host, web.port, web.trusted_header, web.admins) == ("127.0.0.1", 8470, "", [])
