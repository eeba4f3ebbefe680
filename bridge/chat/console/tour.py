"""What the console says at start, and the tour of the bridge it offers on the simulator.

A newcomer on a machine without agy gets the project's simulator, whose default reply only
repeats the message: the banner ends with three lines to paste, each showing one thing the
bridge does (a late message handed to the running turn, an approval, a stop), steered by the
simulator's own directives (bridge/simulator/README.md). Each line says in its own words what to
do next, so pasting the whole line is right.
"""

from __future__ import annotations

SIMULATED = (
    "agy is not installed here, so this console talks to agy-bridge's built-in agy simulator:\n"
    "answers are simulated, not written by a model. Install agy and sign in (run `agy` once)\n"
    "to talk to the real agent."
)

TOUR = (
    "type a second line while this turn works [[calls 3]] [[sleep 3]]",
    "run a command that needs your approval [[tool run_command ls -la]]",
    "a long turn: type !stop to end it [[calls 30]] [[sleep 2]]",
)

TOUR_INTRO = (
    "Paste one of these lines to see the bridge at work (the `[[…]]` parts steer the "
    "simulator; bridge/simulator/README.md lists them):"
)

# The simulator's model calls before the last each run `echo step N` (its stand-in for the
# agent's work). Allowed on the simulator only, and said so in the banner's approvals line:
# otherwise the tour's first and third lines would stop at an approval of the simulator's own
# scaffolding, hiding what they show.
SIMULATOR_STEPS = "echo step *"

HINT = (
    "ℹ️ The simulator only repeats what it got. Paste a line from the start "
    "(a late message, an approval, `!stop`), or `!help` for the commands."
)


def banner(status_lines: list[str], *, simulated: bool) -> str:
    """The start banner in Markdown: the simulator's notice, how threads run (one line each),
    and on the simulator the tour."""
    parts = [SIMULATED] if simulated else []
    parts.append("\n".join(status_lines))
    if simulated:
        parts.append("\n".join([TOUR_INTRO, *(f"`{line}`" for line in TOUR)]))
    return "\n\n".join(parts)


def default_reply(answer: str) -> bool:
    """Whether ``answer`` is the simulator's default reply to a message without directives
    (it starts "You said: " and repeats the text, directives included)."""
    return answer.startswith("You said: ") and "[[" not in answer
