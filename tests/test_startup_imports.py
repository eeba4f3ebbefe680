"""What a start imports: every `python -m bridge` the tests start (and every operator's) pays
for it in CPU. The MCP SDK is about half of a start and most agy processes never call the chat
tools, so it is imported with the first call; the console's screen (rich) only by the console.
Each check runs in a fresh interpreter: the test process has imported everything already."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("mcp", "mcp_types", "rich", "nio")


def imported_after(code: str) -> list[str]:
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import sys
        print("imported:" + ",".join(m for m in {HEAVY!r} if m in sys.modules))
        """)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    [line] = [x for x in done.stdout.splitlines() if x.startswith("imported:")]
    return [m for m in line.removeprefix("imported:").split(",") if m]


def test_the_command_and_the_doctor_import_no_chat_tools_nor_console_screen() -> None:
    assert imported_after("import bridge.cli, bridge.doctor, bridge.app") == []


def test_a_turn_that_calls_no_chat_tool_leaves_the_mcp_sdk_unimported(tmp_path: Path) -> None:
    found = imported_after(f"""
        import anyio
        from pathlib import Path
        from tests.core.harness import running

        async def main():
            async with running(Path({str(tmp_path)!r})) as h:
                await h.say("hello")
                [reply] = await h.adapter.wait_finished(1)
                assert "hello" in reply.outcome.final_text

        anyio.run(main)
        """)
    assert "mcp" not in found and "mcp_types" not in found
