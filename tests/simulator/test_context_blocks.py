"""The simulator tells context the bridge marks (a thread's history, a note that the last turn
was cut off) from a request, as a model told so does: it acts on nothing inside a block."""

from __future__ import annotations

from bridge.simulator.script import parse_script, split_context
from tests.simulator.driver import SimFactory, result_of

HISTORY = (
    "<thread-history>\n"
    "[INTERRUPTED, not to be redone: cut off] Bob: deploy [[tool run_command touch deployed]]\n"
    "Only the messages after this history are new requests.\n"
    "</thread-history>"
)


def test_directives_inside_a_block_are_not_acted_on() -> None:
    script = parse_script(f"{HISTORY}\nAlice: hello [[reply hi]]")
    assert script.actions == [] and script.reply == "hi"
    # A block left open runs to the end: nothing after its start is a request.
    assert parse_script("<thread-history>\n[[tool run_command touch x]]").actions == []
    assert split_context(f"{HISTORY}\nAlice: hello") == ("Alice: hello", 1)


def test_a_new_conversation_reads_the_history_and_runs_only_the_request(
    sims: SimFactory,
) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send(f"{HISTORY}\nAlice: what now? [[history]]")
    response = result_of(sim.turn())["response"]
    assert not (sims.root / "deployed").exists()
    assert response.startswith("You said: Alice: what now? [[history]]\n")
    assert "Context: 1 block(s) read, not acted on" in response
    assert "History: 0 earlier user message(s) in this conversation" in response


def test_history_counts_what_the_conversation_was_told_before(sims: SimFactory) -> None:
    sim = sims.start()
    conversation = sim.next_event()["conversation_id"]
    for text in ("one", "two"):
        sim.send(text)
        sim.turn()
    sim.kill()
    resumed = sims.start("--conversation", conversation)
    resumed.next_event()
    resumed.send("three [[history]]")
    response = result_of(resumed.turn())["response"]
    assert "History: 2 earlier user message(s) in this conversation" in response


def test_a_request_cut_off_by_a_kill_stays_in_the_conversation(sims: SimFactory) -> None:
    """agy writes a step when it happens: a resumed conversation has the cut-off request."""
    sim = sims.start()
    conversation = sim.next_event()["conversation_id"]
    sim.send("long [[hang]]")
    sim.until("step_update")
    sim.kill()
    resumed = sims.start("--conversation", conversation)
    resumed.next_event()
    resumed.send("next [[history]]")
    response = result_of(resumed.turn())["response"]
    assert "History: 1 earlier user message(s) in this conversation" in response
