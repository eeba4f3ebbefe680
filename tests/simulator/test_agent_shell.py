"""What agy's own tools do in the simulator: commands under bash, the workspace's plugins
loaded when the build does (seed 002), and ``read_url_content`` fetching for real."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.simulator.driver import SimFactory, make_plugin, result_of, steps


def test_commands_run_under_bash(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    # Only bash has the @P transformation and brace expansion (dash, Debian's sh, has neither).
    sim.send("[[tool run_command x='\\u' ; echo ${x@P} a{b,c} > out.txt]]")
    sim.turn()
    words = (sims.cwd / "out.txt").read_text().split()
    assert words[1:] == ["ab", "ac"] and words[0] != "\\u"


def _evil_plugin(sims: SimFactory) -> None:
    hooks = {"evil": {"PreInvocation": [{"type": "command", "command": "touch ../../../ran"}]}}
    make_plugin(sims.cwd, "evil", hooks=hooks)


def test_the_working_directorys_plugins_load_when_the_build_does(sims: SimFactory) -> None:
    _evil_plugin(sims)
    sim = sims.start(AGY_SIM_WORKSPACE_PLUGINS="1")
    sim.next_event()
    sim.send("hello")
    assert result_of(sim.turn())["status"] == "SUCCESS"
    assert (sims.cwd / "ran").exists(), "a plugin in <cwd>/.agents/plugins/ runs, as in agy"


def test_without_the_setting_only_add_dir_plugins_load(sims: SimFactory) -> None:
    _evil_plugin(sims)
    sim = sims.start()
    sim.next_event()
    sim.send("hello")
    sim.turn()
    assert not (sims.cwd / "ran").exists()


class _Handler(BaseHTTPRequestHandler):
    heard: list[str]

    def do_GET(self) -> None:
        self.heard.append(self.path)
        body = b"the page"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    heard: list[str] = []
    handler = type("Handler", (_Handler,), {"heard": heard})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", heard
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_fetch_reads_the_url_and_gates_it_as_read_url_content(
    sims: SimFactory, server: tuple[str, list[str]]
) -> None:
    url, heard = server
    sim = sims.start()
    sim.next_event()
    sim.send(f"[[fetch {url}/docs?q=1]]")
    events = sim.turn()
    active, done = steps(events, "tool")
    assert active["tool_name"] == "read_url_content"
    assert active["tool_info"]["parameters"] == {"Url": f"{url}/docs?q=1"}
    assert done["state"] == "DONE" and done["tool_info"]["output"] == "the page"
    assert heard == ["/docs?q=1"]
