"""deploy/slack-manifest.yaml: valid against the fields of Slack's app manifest reference
(docs.slack.dev "App manifest reference"; unknown keys are refused, as Slack refuses them), and
subscribed to every event the adapter listens for, with the scopes its calls need."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "slack-manifest.yaml"
SLACK = ROOT / "bridge" / "chat" / "slack"

_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string", "minLength": 1}}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


# The manifest's fields the bridge's app uses, with their types (the reference names more).
SCHEMA = _object(
    {
        "_metadata": _object(
            {"major_version": {"type": "integer"}, "minor_version": {"type": "integer"}}
        ),
        "display_information": _object(
            {
                "name": {"type": "string", "minLength": 1, "maxLength": 35},
                "description": {"type": "string", "maxLength": 140},
                "long_description": {"type": "string", "minLength": 175, "maxLength": 4000},
                "background_color": {"type": "string", "pattern": "^#[0-9a-fA-F]{6}$"},
            },
            ("name",),
        ),
        "features": _object(
            {
                "app_home": _object(
                    {
                        "home_tab_enabled": {"type": "boolean"},
                        "messages_tab_enabled": {"type": "boolean"},
                        "messages_tab_read_only_enabled": {"type": "boolean"},
                    }
                ),
                "bot_user": _object(
                    {
                        "display_name": {"type": "string", "minLength": 1, "maxLength": 80},
                        "always_online": {"type": "boolean"},
                    },
                    ("display_name",),
                ),
                "agent_view": _object(
                    {
                        "agent_description": {"type": "string", "minLength": 1},
                        "suggested_prompts": {"type": "array", "maxItems": 4},
                    }
                ),
                "assistant_view": _object(
                    {
                        "assistant_description": {"type": "string", "minLength": 1},
                        "suggested_prompts": {"type": "array", "maxItems": 4},
                    }
                ),
            }
        ),
        "oauth_config": _object(
            {
                "redirect_urls": _STRINGS,
                "scopes": _object({"bot": _STRINGS, "user": _STRINGS}),
            }
        ),
        "settings": _object(
            {
                "event_subscriptions": _object(
                    {
                        "request_url": {"type": "string", "format": "uri"},
                        "bot_events": _STRINGS,
                        "user_events": _STRINGS,
                    }
                ),
                "interactivity": _object(
                    {"is_enabled": {"type": "boolean"}, "request_url": {"type": "string"}},
                    ("is_enabled",),
                ),
                "org_deploy_enabled": {"type": "boolean"},
                "socket_mode_enabled": {"type": "boolean"},
                "token_rotation_enabled": {"type": "boolean"},
            }
        ),
    },
    ("display_information",),
)


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    loaded = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def test_the_manifest_has_only_fields_slack_knows(manifest: dict[str, Any]) -> None:
    jsonschema.validate(manifest, SCHEMA)
    # Slack's agent messaging experience, not both experiences at once.
    features = manifest["features"]
    assert "agent_view" in features and "assistant_view" not in features


def test_a_typo_in_the_manifest_is_caught(manifest: dict[str, Any]) -> None:
    broken = {**manifest, "features": {**manifest["features"], "app_hom": {}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def test_every_event_the_adapter_listens_for_is_subscribed(manifest: dict[str, Any]) -> None:
    listened = {
        event
        for module in SLACK.glob("*.py")
        for event in re.findall(r'app\.event\("([a-z_]+)"\)', module.read_text(encoding="utf-8"))
    }
    assert {"app_mention", "app_home_opened", "agent_session_stopped"} <= listened
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    # "message" arrives through the message.* subscriptions; the assistant container's two
    # events are for older apps on assistant_view (docs/slack.md says how to subscribe them).
    legacy = {"assistant_thread_started", "assistant_thread_context_changed"}
    assert {"message.channels", "message.groups", "message.im", "message.mpim"} <= events
    assert listened - {"message"} - legacy <= events
    assert {"app_home_opened", "app_context_changed", "agent_session_title_changed"} <= events


def test_the_scopes_cover_what_the_bridge_calls(manifest: dict[str, Any]) -> None:
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    needed = {
        "chat:write",  # answers, streams, sessions, status
        "assistant:write",  # assistant.threads.setSuggestedPrompts
        "im:history",  # the first-visit check of the Messages tab
        "channels:read",  # conversations.info / members for the channel a person looks at
        "groups:read",
        "channels:history",  # its latest messages
        "groups:history",
        "users:read",
        "files:read",
        "files:write",
        "reactions:write",
        "app_mentions:read",
    }
    assert needed <= scopes
    assert manifest["features"]["app_home"]["home_tab_enabled"] is True
