"""How long an undecided tool step of agy's stream may wait for its PreToolUse call.

The wait itself is proven end to end in tests/security/test_gate_hooks.py (a build that skips
PreToolUse, its `sleep 30` stopped while it runs), there with a short ``hook_step_grace``;
here: the default margin, and that the setting reaches each thread's watch.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bridge.config import ConfigError, build_config
from bridge.core.approvals.hook_watch import MIN_STEP_GRACE, HookWatch
from bridge.core.thread.work import hook_watch


def test_the_default_grace_is_ten_seconds_or_five_hook_proofs() -> None:
    assert MIN_STEP_GRACE == 10.0
    assert HookWatch().grace == 10.0
    assert HookWatch(1.0).grace == 10.0
    assert HookWatch(4.0).grace == 20.0


def test_a_configured_grace_is_the_threads_grace() -> None:
    assert HookWatch(4.0, grace=1.5).grace == 1.5
    for approvals, grace in (({}, 10.0), ({"hook_step_grace": 2}, 2.0)):
        config = build_config({"approvals": {"mode": "ask", **approvals}}, environ={})
        parts: Any = SimpleNamespace(config=config, hook_health=None)
        watch = hook_watch(parts, "t", lambda command: None)
        assert watch.grace == grace
        assert watch.seconds == config.approvals.hook_proof_seconds


def test_a_grace_of_zero_is_refused() -> None:
    with pytest.raises(ConfigError, match="hook_step_grace"):
        build_config({"approvals": {"hook_step_grace": 0}}, environ={})
