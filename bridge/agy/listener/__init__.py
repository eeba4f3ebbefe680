"""The loopback listener: agy's hook calls and the session's MCP servers, one port per bridge.

Every agy session registers here and gets its own random token; every URL it is given starts
with that token, so a browser page or another local user that can reach the port cannot call
anything without reading the session's plugin files. See the README's security section.
"""

from bridge.agy.listener.hook_command import (
    ToolHookTiming,
    answer_deadline,
    hook_command,
    tool_hook_command,
    tool_hook_timing,
    url_file_name,
    url_file_text,
)
from bridge.agy.listener.registration import HookFunc, Registration, UndeliveredFunc
from bridge.agy.listener.serving import Listener, open_listener

__all__ = [
    "HookFunc",
    "Listener",
    "Registration",
    "ToolHookTiming",
    "UndeliveredFunc",
    "answer_deadline",
    "hook_command",
    "open_listener",
    "tool_hook_command",
    "tool_hook_timing",
    "url_file_name",
    "url_file_text",
]
