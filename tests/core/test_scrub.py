"""Text from agy on its way to a chat: encodable, no listener token, no configured secret."""

from __future__ import annotations

from bridge.core.scrub import MIN_SECRET, Scrubber, encodable


def test_lone_surrogates_become_replacement_characters() -> None:
    assert encodable("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    text = "plain é ✓ 🎉"
    assert encodable(text) is text
    assert Scrubber()("x\udc80y") == "x\ufffdy"


def test_a_listener_url_loses_its_token_whatever_the_host_spelling() -> None:
    token = "AbC-_0123456789abcdef"
    scrub = Scrubber()
    for host in ("127.0.0.1", "localhost", "[::1]"):
        url = f"curl http://{host}:8123/{token}/hook/PreInvocation"
        assert scrub(url) == f"curl http://{host}:8123/***/hook/PreInvocation"
    # Short path segments and other hosts are not tokens.
    assert scrub("http://127.0.0.1:80/short/x") == "http://127.0.0.1:80/short/x"
    assert scrub(f"https://example.org:443/{token}/x") == f"https://example.org:443/{token}/x"
    assert scrub(f"127.0.0.1:9/{token}") == f"127.0.0.1:9/{token}", "no path after it"


def test_secrets_are_replaced_longest_first_and_short_values_are_ignored() -> None:
    scrub = Scrubber(["abcdefgh", "abcdefgh-longer", "x" * (MIN_SECRET - 1)])
    assert scrub("abcdefgh-longer and abcdefgh") == "*** and ***"
    assert scrub("xxxxxxx stays") == "xxxxxxx stays"
    assert Scrubber(["12345678"]).secrets == ["12345678"]
    assert Scrubber(["1234567"]).secrets == []


def test_a_secret_inside_a_longer_one_does_not_break_the_longer_one_up() -> None:
    assert Scrubber(["bcdefghi", "abcdefghij"])("x abcdefghij y") == "x *** y"
