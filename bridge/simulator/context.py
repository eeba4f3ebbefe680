"""What every turn of one simulator process shares, and the hook runs it makes."""

from __future__ import annotations

import sys
from pathlib import Path

from bridge.simulator.events import Emitter
from bridge.simulator.hooks import (
    ALLOWED,
    HookRun,
    ToolVerdict,
    hook_input,
    run_handler,
    run_tool_handler,
    tool_hook_input,
)
from bridge.simulator.plugins import McpServer, Plugin
from bridge.simulator.record import record
from bridge.simulator.store import Conversation, ConversationStore
from bridge.simulator.waits import Waits


def warn(message: str) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()


@record
class Context:
    conversation: Conversation
    store: ConversationStore
    emitter: Emitter
    plugins: list[Plugin]
    workspace_paths: list[str]
    model_name: str
    home: Path
    cwd: str
    waits: Waits
    # A process started with --conversation shows a text-less system_message in its first turn.
    resume_note_pending: bool = False

    @property
    def conversation_id(self) -> str:
        return self.conversation.conversation_id

    def save(self) -> None:
        self.store.save(self.conversation)

    def step(self, state: str, step_type: str, index: int | None = None, **fields: object) -> int:
        """Emit one step (a new index unless ``index`` is given) and return its index."""
        if index is None:
            index = self.conversation.take_step()
        self.emitter.step(self.conversation_id, index, state, step_type, **fields)
        return index

    def find_server(self, name: str) -> McpServer | None:
        """A server by its agent-facing name (``bridge_chat``) or its bare one (``chat``)."""
        servers = [server for plugin in self.plugins for server in plugin.mcp_servers]
        for server in servers:
            if server.name == name:
                return server
        return next((server for server in servers if server.bare_name == name), None)

    def pre_invocation(
        self, conversation_id: str, invocation_num: int, initial_num_steps: int
    ) -> list[HookRun]:
        """Run every plugin's ``PreInvocation`` handlers, in order, for one model call."""
        payload = hook_input(
            conversation_id=conversation_id,
            workspace_paths=list(self.workspace_paths),
            transcript_path=str(
                self._brain(conversation_id) / ".system_generated/logs/transcript.jsonl"
            ),
            artifact_dir=str(self._brain(conversation_id)),
            model_name=self.model_name,
            invocation_num=invocation_num,
            initial_num_steps=initial_num_steps,
        )
        runs = []
        for plugin in self.plugins:
            for handler in plugin.hooks.get("PreInvocation", []):
                run = self.waits.call(run_handler, handler, payload, conversation_id)
                if run.error:
                    warn(f"warning: PreInvocation hook {plugin.name}/{handler.bundle}: {run.error}")
                runs.append(run)
        return runs

    def pre_tool_use(self, tool: str, args: dict[str, object], step_idx: int) -> ToolVerdict:
        """Run the ``PreToolUse`` handlers whose matcher names ``tool`` (or is ``*``), plugin by
        plugin and group by group; the first that does not allow the call refuses it."""
        conversation_id = self.conversation_id
        common = {
            "conversationId": conversation_id,
            "workspacePaths": list(self.workspace_paths),
            "transcriptPath": str(
                self._brain(conversation_id) / ".system_generated/logs/transcript.jsonl"
            ),
            "artifactDirectoryPath": str(self._brain(conversation_id)),
            "modelName": self.model_name,
        }
        payload = tool_hook_input(common, tool, dict(args), step_idx)
        for plugin in self.plugins:
            for group in plugin.tool_hooks.get("PreToolUse", []):
                if not group.matches(tool):
                    continue
                for handler in group.handlers:
                    verdict = self.waits.call(run_tool_handler, handler, payload, conversation_id)
                    if not verdict.allowed:
                        warn(f"warning: PreToolUse hook {handler.name}: {verdict.message}")
                        return verdict
        return ALLOWED

    def _brain(self, conversation_id: str) -> Path:
        return self.home / "brain" / conversation_id
