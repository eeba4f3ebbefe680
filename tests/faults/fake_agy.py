"""A tiny stand-in for agy with the failures the simulator does not script. Standard library only.

Run as ``python fake_agy.py [agy flags]``. It speaks just enough of agy's stream-json: ``init``
(reusing ``--conversation ID`` when given), and for each stdin line a ``user_input`` step, the
answer ``You said: <text>`` as one delta, and a SUCCESS ``result``.

``FAKE_AGY_DIR`` (environment) is a control folder:
- a file ``start`` changes how the process starts: ``exit`` fails before ``init`` (a stderr
  line, exit 3), ``hang`` never prints anything on stdout, ``fuzz:<kind>`` prints that junk
  right after ``init``;
- every turn's text is appended to ``received.log`` (one JSON string a line).

Markers in a turn's text pick that turn's behaviour:
- ``FUZZ:<kind>``: print that kind of junk on stdout first, then answer normally;
- ``SURROGATE-ANSWER``: the answer ends with a lone surrogate (valid JSON, not encodable);
- ``WEDGE``: ignore SIGINT and never answer (a hung agy);
- ``GARBAGE-EXIT``: print junk, then exit 1 without a result;
- ``LEAK-EXIT``: print the session's hook command line on stderr (as a failing hook would be
  reported), then exit 2 without a result.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

# Neither typing nor pathlib: the bridge starts this file for every turn and probe of the fault
# tests, and each would add milliseconds of imports to what is otherwise a bare interpreter.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

HELP = """Usage: agy [flags]
Flags:
  -p, --print string
      --input-format string
      --output-format string
      --add-dir stringArray
      --model string
      --conversation string
      --dangerously-skip-permissions
"""
OUT = sys.stdout.buffer
NEST = 100_000
# A line over the bridge's default 8 MiB cap.
HUGE = 12 * 1024 * 1024


def emit(obj: Any) -> None:
    OUT.write(json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n")
    OUT.flush()


def raw(data: bytes) -> None:
    OUT.write(data)
    OUT.flush()


def delta(text: str) -> bytes:
    step = {"step_type": "agent_response", "state": "ACTIVE", "text_delta": text}
    return json.dumps({"event": "step_update", "step_update": step}).encode()


def fuzz(kind: str) -> None:
    """Junk on stdout, by kind. None of it is a valid event the bridge should show."""
    if kind == "bytes":
        import random  # here, as re and uuid below: the bridge's probes (--help) import neither

        rng = random.Random(kind)
        raw(bytes(rng.getrandbits(8) for _ in range(256 * 1024)) + b"\n")
    elif kind == "hugeline":
        raw(b'{"event":"step_update","step_update":{"text_delta":"' + b"x" * HUGE + b'"}}\n')
        raw(b"y" * HUGE + b"\n")
    elif kind == "nested":
        raw(b"[" * NEST + b"]" * NEST + b"\n")
        raw(b'{"a":' * NEST + b"1" + b"}" * NEST + b"\n")
        raw(b'{"event":"step_update","step_update":' + b"[" * NEST + b"]" * NEST + b"}\n")
    elif kind == "unknown":
        lines: tuple[Any, ...] = (
            {"event": "sim_mystery", "payload": {"x": [1, 2, 3]}},
            {"event": 123},
            {"event": None},
            {},
            [],
            "a string",
            42,
            None,
            {"event": "step_update"},
            {"event": "step_update", "step_update": []},
            {
                "event": "step_update",
                "step_update": {"step_type": "agent_response", "text_delta": {"x": 1}},
            },
            {"event": "result", "result": "not an object"},
            {"event": "result", "result": {"status": {"nested": True}}},
            {"event": "step_update", "step_update": {"step_type": "holo_deck", "state": "WARP"}},
        )
        for line in lines:
            emit(line)
    elif kind == "nul":
        raw(b"\x00\x00\x00\n")
        raw(b'{"event":"step_update","step_update":{"text_delta":"a\x00b"}}\n')
        raw(b'\x00{"event":"sim_mystery"}\x00\n')
        raw(b"\x00" * 4096 + b"\n")
    elif kind == "utf8":
        raw(b"\xff\xfe\xfd\n")
        raw(b'{"event":"step_update","step_update":{"text_delta":"\xc3\x28 \xc0\xaf"}}\n')
        raw(b'{"event":"sim_mystery","x":"\xed\xa0\x80"}\n')
    elif kind == "surrogate":
        # Valid JSON whose strings decode to lone surrogates, which no UTF-8 encoder accepts.
        raw(
            b'{"event":"step_update","step_update":{"step_type":"agent_response",'
            b'"state":"ACTIVE","text_delta":"\\ud800 half a pair \\udfff"}}\n'
        )
    else:
        raise SystemExit(f"fake agy: unknown fuzz kind {kind!r}")


def turn_text(line: bytes) -> str:
    message = json.loads(line)["message"]
    return "\n".join(block.get("text", "") for block in message["content"])


def answer(conversation: str, text: str) -> None:
    reply = f"You said: {text}\n"
    if "SURROGATE-ANSWER" in text:
        reply += "\udc80 a lone surrogate in the final answer\n"
    step = {"conversation_id": conversation, "step_type": "user_input", "state": "DONE"}
    emit({"event": "step_update", "step_update": step})
    raw(delta(reply) + b"\n")
    result = {"conversation_id": conversation, "status": "SUCCESS", "response": reply}
    # ASCII escapes: the only way to write a lone surrogate into valid JSON.
    raw(json.dumps({"event": "result", "result": result}).encode() + b"\n")


def hook_command(argv: list[str]) -> str:
    """The PreInvocation command of the plugin in the ``--add-dir`` folder."""
    plugin = os.path.join(argv[argv.index("--add-dir") + 1], ".agents/plugins/bridge")
    hooks = json.loads(_read(os.path.join(plugin, "hooks.json")))
    command = str(hooks["bridge"]["PreInvocation"][0]["command"])
    # The URL with the token is in the file the command names: a leaking agy prints it too.
    return f"{command} ({_read(os.path.join(plugin, 'PreInvocation.curl')).strip()})"


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def main(argv: list[str]) -> int:
    if "--help" in argv:
        print(HELP)
        return 0
    if "--version" in argv:
        print("agy 0.0.0-fake")
        return 0
    control = os.environ["FAKE_AGY_DIR"]
    start = os.path.join(control, "start")
    how = _read(start).strip() if os.path.exists(start) else ""
    if how == "exit":
        print("fake agy: your login has expired, run `agy` to sign in", file=sys.stderr)
        return 3
    if how == "hang":
        print("fake agy: waiting for the network", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    if "--conversation" in argv:
        conversation = argv[argv.index("--conversation") + 1]
    else:
        import uuid

        conversation = str(uuid.uuid4())
    emit({"event": "init", "conversation_id": conversation, "init": {"cwd": os.getcwd()}})
    if how.startswith("fuzz:"):
        fuzz(how.removeprefix("fuzz:"))
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        text = turn_text(line)
        with open(os.path.join(control, "received.log"), "a", encoding="utf-8") as log:
            log.write(json.dumps(text) + "\n")
        if "WEDGE" in text:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            while True:
                time.sleep(3600)
        if "LEAK-EXIT" in text:
            print(f"hook bridge/PreInvocation failed: sh -c {hook_command(argv)}", file=sys.stderr)
            return 2
        if "GARBAGE-EXIT" in text:
            raw(b"panic: \xff\xfe not json at all\n{{{{\n")
            return 1
        if "FUZZ:" in text:
            import re

            fuzz_kinds = re.findall(r"FUZZ:([a-z0-9]+)", text)
        else:
            fuzz_kinds = []
        for kind in fuzz_kinds:
            fuzz(kind)
        answer(conversation, text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
