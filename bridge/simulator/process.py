"""The life of one simulated agy process in stream-json print mode.

Start (model check, plugins, conversation, ``init``), then one turn per stdin line until EOF.
Exit codes and the results around them follow real agy: a bad input line or an unknown
model answers an ERROR ``result`` and exits 1; SIGINT mid-turn answers ``interrupted`` and
exits 1 (quietly when idle); ``--print-timeout`` answers ``timeout waiting for response``.
Every wait (the next stdin line, a hook, a tool, a scripted sleep) is one of ``Waits``, which
SIGINT and the deadline end.
"""

from __future__ import annotations

import os
import sys

from bridge.simulator.account import account_error, sim_home
from bridge.simulator.atomic import new_uuid4
from bridge.simulator.context import Context, warn
from bridge.simulator.events import Emitter
from bridge.simulator.flags import Options
from bridge.simulator.models import DEFAULT_MODEL, invalid_model_error, is_known
from bridge.simulator.plugins import FatalConfigError, load_global, load_plugins
from bridge.simulator.record import replace
from bridge.simulator.store import Conversation, ConversationStore, Usage
from bridge.simulator.stream_input import Ignored, InputError, LineReader, parse_line
from bridge.simulator.turn import ScriptedEnd, SimulatedCrash, TurnState, crash, run_turn
from bridge.simulator.waits import Deadline, Interrupted, Waits


class PrintMode:
    def __init__(self, options: Options):
        self.options = options
        self.emitter = Emitter(sys.stdout.buffer)
        self.home = sim_home()
        self.store = ConversationStore(self.home)
        self.waits = Waits()

    def run(self) -> int:
        self.waits.install()
        try:
            return self._run()
        except Interrupted:
            return 1  # SIGINT while idle or starting: exit quietly

    def _run(self) -> int:
        delay = float(os.environ.get("AGY_SIM_STARTUP_DELAY") or 0)
        if delay > 0:
            self.waits.sleep(delay)
        ctx = self._start()
        if ctx is None:
            return 1
        reader = LineReader(sys.stdin.buffer)
        reader.start()
        if self.options.print_prompt:
            # A prompt given with --print (or a flag a bare -p swallowed) is the first turn.
            code = self._turn(ctx, self.options.print_prompt)
            if code is not None:
                return code
        while True:
            line = self.waits.get(reader.queue)
            if line is None:
                return 0
            parsed = parse_line(line)
            if parsed is None:
                continue
            if isinstance(parsed, Ignored):
                warn(parsed.warning)
            elif isinstance(parsed, InputError):
                self._finish(ctx, None, status="ERROR", error=parsed.message)
                return 1
            else:
                code = self._turn(ctx, parsed.text)
                if code is not None:
                    return code

    def _start(self) -> Context | None:
        """Everything before ``init``; ``None`` after reporting why the process must end."""
        options = self.options
        refused = account_error()
        if refused is not None:
            # Before anything else, a resumed conversation included: it stays as it was.
            warn(f"error: {refused}")
            self._early_error(refused)
            return None
        if options.model is not None and not is_known(options.model):
            self._early_error(invalid_model_error(options.model, options.effort or ""))
            return None
        # AGY_SIM_WORKSPACE_PLUGINS=1: the working directory is a workspace too, as for agy,
        # which loads <workspace>/.agents/plugins/* (seed 002): whatever the agent wrote there
        # runs at the next start.
        workspaces = list(options.add_dirs)
        if os.environ.get("AGY_SIM_WORKSPACE_PLUGINS") == "1":
            workspaces.insert(0, os.getcwd())
        accept_url = os.environ.get("AGY_SIM_ACCEPTS_URL") == "1"
        try:
            plugins = load_plugins(workspaces, warn, accept_url=accept_url)
            found = load_global(self.home, warn, accept_url=accept_url)
            plugins += [found] if found is not None else []
        except FatalConfigError as exc:
            self._early_error(str(exc))
            return None
        if os.environ.get("AGY_SIM_NO_HOOKS") == "1":
            # As the agy builds whose hooks load but never run (reported for logins by API
            # key; plugin hooks not loaded on some builds): every tool call runs unasked.
            plugins = [replace(plugin, hooks={}, tool_hooks={}) for plugin in plugins]
        elif os.environ.get("AGY_SIM_NO_TOOL_HOOKS") == "1":
            # A build that runs PreInvocation (and the other session hooks) but never
            # PreToolUse: the hook proof passes, and every tool call runs unasked.
            plugins = [replace(plugin, tool_hooks={}) for plugin in plugins]
        cwd = os.getcwd()
        conversation, resumed = self._conversation(cwd)
        if conversation is None:
            warn(f"error: conversation {options.conversation} not found")
            return None
        ctx = Context(
            conversation=conversation,
            store=self.store,
            emitter=self.emitter,
            plugins=plugins,
            workspace_paths=list(options.add_dirs),
            model_name=options.model or DEFAULT_MODEL,
            home=self.home,
            cwd=cwd,
            waits=self.waits,
            resume_note_pending=resumed,
        )
        if not resumed:
            ctx.save()  # the id can be resumed even if this process ends before a turn
        self.emitter.init(
            conversation.conversation_id,
            inside=os.environ.get("AGY_SIM_INIT_LAYOUT", "beside") == "inside",
            model=options.model,
            cwd=cwd,
            permission_mode=self._permission_mode(),
        )
        return ctx

    def _conversation(self, cwd: str) -> tuple[Conversation | None, bool]:
        wanted = self.options.conversation
        if wanted:
            return self.store.load(wanted), True
        if self.options.resume_latest:
            latest = self.store.latest_for(cwd)
            if latest is not None:
                return latest, True
        return Conversation(conversation_id=new_uuid4(), cwd=cwd), False

    def _permission_mode(self) -> str:
        if self.options.skip_permissions:
            return "always-proceed"
        return self.options.mode or "request-review"

    def _early_error(self, error: str) -> None:
        """A result before any init: empty conversation id, zero usage (agy's bad-model shape)."""
        self.emitter.result(
            "",
            status="ERROR",
            response="",
            error=error,
            duration_seconds=0,
            num_turns=0,
            usage=Usage(),
        )

    def _turn(self, ctx: Context, text: str) -> int | None:
        """Run one turn; an exit code when the process must end, else ``None``."""
        state = TurnState.for_text(text)
        try:
            with self.waits.deadline(self.options.print_timeout):
                delay = float(os.environ.get("AGY_SIM_TURN_DELAY") or 0)
                if delay > 0:
                    self.waits.sleep(delay)  # a loaded host: the turn read, no step yet
                run_turn(ctx, state)
        except Interrupted:
            warn("error: interrupted")
            self._finish(ctx, state, status="ERROR", error="interrupted")
            return 1
        except (Deadline, TimeoutError):
            self._finish(ctx, state, status="ERROR", error="timeout waiting for response")
            return 1
        except ScriptedEnd as end:
            self._finish(ctx, state, status="ERROR", error=end.text)
            return 1 if end.fatal else None
        except SimulatedCrash:
            ctx.save()
            crash()
            return 2
        if state.hook_error is not None:
            # As recorded (1.1.24): a failing PreToolUse handler makes the turn an ERROR that
            # still carries the model's answer.
            self._finish(ctx, state, status="ERROR", error=state.hook_error, keep_response=True)
            return None
        self._finish(ctx, state, status="SUCCESS")
        return None

    def _finish(
        self,
        ctx: Context,
        state: TurnState | None,
        *,
        status: str,
        error: str | None = None,
        keep_response: bool = False,
    ) -> None:
        """Store the conversation, then write the turn's ``result`` (totals: the conversation's)."""
        conversation = ctx.conversation
        if state is not None:
            conversation.duration_seconds += state.elapsed()
        ctx.save()
        answered = status == "SUCCESS" or keep_response
        self.emitter.result(
            conversation.conversation_id,
            status=status,
            response=state.response if answered and state is not None else "",
            error=error,
            duration_seconds=conversation.duration_seconds,
            num_turns=conversation.num_turns,
            usage=conversation.usage,
            denied_actions=state.denied if state is not None else None,
        )
        self.emitter.nulls = False
