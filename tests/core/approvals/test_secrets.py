"""Secret paths: reads of them ask (file tools too), and the scrubber learns their values."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bridge.core.approvals.argv_checks import below, within
from bridge.core.approvals.policy import Allow, Ask, Place, Rules, judge
from bridge.core.approvals.secrets import SecretFiles, values_in
from bridge.core.scrub import Scrubber


def _place(tmp_path: Path) -> tuple[Place, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    login = state / "oauth_creds.json"
    login.write_text(json.dumps({"access_token": "ya29.made-up-access-token-1234567890"}))
    return Place(workspace=ws, secrets=(login,)), login


def test_a_read_tool_asks_for_the_login_and_a_search_over_a_folder_holding_it(
    tmp_path: Path,
) -> None:
    place, login = _place(tmp_path)
    for name, args in (
        ("view_file", {"AbsolutePath": str(login)}),
        ("grep_search", {"SearchPath": str(login.parent), "Query": "token"}),
    ):
        verdict = judge(name, args, Rules(), place)
        assert isinstance(verdict, Ask) and verdict.pattern is None, (name, verdict)
    # Listing names is no read of contents; other files read at once.
    assert isinstance(
        judge("list_dir", {"DirectoryPath": str(login.parent)}, Rules(), place), Allow
    )
    assert isinstance(judge("view_file", {"AbsolutePath": "/etc/hostname"}, Rules(), place), Allow)


def test_a_command_naming_the_login_asks_and_is_never_allowed_always(tmp_path: Path) -> None:
    place, login = _place(tmp_path)
    rules = Rules(allow_commands=["cat *", "grep *", "ls *", "sort *", "jq *"])
    link = place.workspace / "innocent.txt"
    os.symlink(login, link)
    for line in (
        f"cat {login}",
        f"grep -r token {login.parent}",
        f"sort -o out.txt {login}",
        f"grep -f{login} x",
        f"jq --rawfile a {login} -n",
        "cat innocent.txt",  # a link in the workspace resolves to it
    ):
        verdict = judge("run_command", {"CommandLine": line}, rules, place)
        assert isinstance(verdict, Ask) and verdict.pattern is None, (line, verdict)
        assert "secret" in verdict.preview
    for line in (f"ls -la {login.parent}", "cat README", "grep -rn x ."):
        assert isinstance(judge("run_command", {"CommandLine": line}, rules, place), Allow), line


def test_the_workspace_inside_a_secret_folder_is_not_secret(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ws = data / "workspaces" / "t1"
    ws.mkdir(parents=True)
    place = Place(workspace=ws, secrets=(data,))
    rules = Rules(allow_commands=["cat *"])
    assert isinstance(judge("run_command", {"CommandLine": "cat README"}, rules, place), Allow)
    line = f"cat {data}/bridge.db"
    assert isinstance(judge("run_command", {"CommandLine": line}, rules, place), Ask)


def test_values_of_logins_and_secret_files() -> None:
    creds = {
        "access_token": "ya29.access-aaaaaaaa",
        "refresh_token": "1//refresh-bbbbbbbb",
        "token_type": "Bearer",
        "expiry_date": 1700000000,
        "scope": "https://www.googleapis.com/auth/cloud-platform",
    }
    found = values_in(json.dumps(creds))
    assert {"ya29.access-aaaaaaaa", "1//refresh-bbbbbbbb"} <= found
    assert "https://www.googleapis.com/auth/cloud-platform" not in found
    env = "# deploy\nexport API_KEY='k-0123456789'\nPASSWORD=hunter2hunter2\nraw-token-value-xyz\n"
    assert {"k-0123456789", "hunter2hunter2", "raw-token-value-xyz"} <= values_in(env)
    netrc = "machine api.example.com login bob password netrc-s3cret-value\n"
    assert "netrc-s3cret-value" in values_in(netrc)


def test_the_scrubber_learns_the_login_at_start_and_when_it_changes(tmp_path: Path) -> None:
    login = tmp_path / "oauth_creds.json"
    login.write_text(json.dumps({"access_token": "first-token-0123456789"}))
    scrub = Scrubber(["config-secret-123"], files=SecretFiles([login], recheck=0.0))
    assert scrub("a first-token-0123456789 b config-secret-123") == "a *** b ***"
    login.write_text(json.dumps({"access_token": "second-token-9876543210-longer"}))
    assert scrub("x second-token-9876543210-longer") == "x ***"
    # A streamed text split inside the secret is caught too.
    stream = scrub.stream()
    shown = stream.feed("the token is second-tok") + stream.feed("en-9876543210-longer.")
    assert "second" not in shown + stream.flush()
    # A login that goes away takes nothing with it: the config's secrets stay.
    login.unlink()
    assert scrub("config-secret-123") == "***"


def test_within_and_below_are_the_parents_relation_of_resolved_paths() -> None:
    # The gate compares resolved paths word by word (argv_checks.within, below): the same
    # answers as `path == root or root in path.parents`, which built a Path per parent.
    paths = [
        Path(p)
        for p in ("/", "/a", "/ab", "/a/b", "/a/bc", "/a/b/c", "/a/b/c/d", "/b", "/b/a", "/a/b/")
    ]
    for path in paths:
        for root in paths:
            assert within(path, root) == (path == root or root in path.parents), (path, root)
            assert below(path, root) == (root in path.parents), (path, root)
