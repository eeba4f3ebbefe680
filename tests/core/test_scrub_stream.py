"""Scrubbing streamed text: a secret cut across deltas is caught, and no text is lost."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from bridge.core.scrub import Scrubber, StreamScrubber

SECRETS = ["xoxb-123456789-abcdef", "xapp-1-zyxwvutsrq", "hunter2hunter2"]


def stream(text: str, cuts: list[int], scrub: Scrubber | None = None) -> tuple[list[str], str]:
    pieces = StreamScrubber(scrub or Scrubber(SECRETS))
    out = []
    bounds = [0, *sorted(cuts), len(text)]
    for start, end in pairwise(bounds):
        out.append(pieces.feed(text[start:end]))
    return out, "".join(out) + pieces.flush()


@pytest.mark.parametrize("cut", range(1, 40))
def test_a_secret_cut_anywhere_never_shows(cut: int) -> None:
    text = "token: xoxb-123456789-abcdef and hunter2hunter2!"
    shown, whole = stream(text, [cut])
    assert whole == "token: *** and ***!"
    for secret in SECRETS:
        assert secret not in "".join(shown) and secret not in whole


def test_every_cut_at_once() -> None:
    text = "a xapp-1-zyxwvutsrq b xoxb-123456789-abcdef c"
    _, whole = stream(text, list(range(1, len(text))))
    assert whole == "a *** b *** c"


def test_only_a_possible_start_of_a_secret_is_held_back() -> None:
    pieces = StreamScrubber(Scrubber(SECRETS))
    assert pieces.feed("plain words ") == "plain words "
    assert pieces.feed("then xo") == "then "
    assert pieces.feed("xo and more") == "xoxo and more"
    assert pieces.feed("ends with hunter") == "ends with "
    assert pieces.flush() == "hunter"
    assert pieces.flush() == ""


def test_without_secrets_nothing_waits() -> None:
    pieces = StreamScrubber(Scrubber())
    assert pieces.feed("xoxb-") == "xoxb-"
    assert pieces.flush() == ""


TOKEN = "abcdefghijklmnopqrstuvwx"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_listener_url_cut_anywhere_loses_its_token(host: str) -> None:
    # The cut may fall inside the host as well as in the port or the token.
    text = f"see http://{host}:8765/{TOKEN}/hook now"
    for cut in range(1, len(text)):
        shown, whole = stream(text, [cut])
        assert whole == f"see http://{host}:8765/***/hook now", cut
        assert TOKEN not in "".join(shown)


def test_every_cut_of_a_listener_url_at_once() -> None:
    text = f"at localhost:8765/{TOKEN}/mcp and [::1]:9/{TOKEN}/x"
    _, whole = stream(text, list(range(1, len(text))))
    assert whole == "at localhost:8765/***/mcp and [::1]:9/***/x"


LISTENER_TOKEN = "AbCdEfGhIjKlMnOpQrStUv"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
@pytest.mark.parametrize("prefix", ["", "x" * 120])
def test_a_listener_url_cut_anywhere_never_shows_its_token(host: str, prefix: str) -> None:
    """agy's words may quote the listener's URL (its path is the session's token): cut across
    deltas, short or after a long text, the token is still taken out."""
    text = f"{prefix}see http://{host}:45678/{LISTENER_TOKEN}/mcp for details"
    start = text.index(host)
    for cut in range(start, text.index("/mcp") + 1):
        pieces = StreamScrubber(Scrubber())
        shown = [pieces.feed(text[:cut]), pieces.feed(text[cut:])]
        whole = "".join(shown) + pieces.flush()
        assert LISTENER_TOKEN[:8] not in "".join(shown), cut
        assert whole == f"{prefix}see http://{host}:45678/***/mcp for details", cut


def test_a_shorter_start_of_another_word_does_not_shrink_what_is_held_back() -> None:
    # The tail "xyzzy-l" may begin the secret; its last letter may also begin "localhost:"
    # (and so may the "l" before it, which is not a start of anything). The longer hold must
    # win, or "xyzzy-" goes out and the secret's rest follows unscrubbed.
    secret = "xyzzy-l0ngsecret"
    pieces = StreamScrubber(Scrubber([secret]))
    shown = [pieces.feed("see lxyzzy-l"), pieces.feed("0ngsecret now")]
    assert shown[0] == "see l"
    assert secret not in "".join(shown)
    assert "".join(shown) + pieces.flush() == "see l*** now"


def test_a_secret_that_repeats_its_first_letter_is_held_back_from_its_real_start() -> None:
    # "aaaX": the tail from the first "a" does not begin the secret, the one from the second
    # does; every place the first letter occurs must be tried, in order.
    secret = "aaXsecretvalue!"
    pieces = StreamScrubber(Scrubber([secret]))
    shown = [pieces.feed("hello aaaX"), pieces.feed("secretvalue! bye")]
    assert shown[0] == "hello a"
    assert secret not in "".join(shown)
    assert "".join(shown) + pieces.flush() == "hello a*** bye"


def test_a_secret_ending_where_a_listener_host_could_begin_is_not_cut_open() -> None:
    """The last "1" of a secret could begin ``127.0.0.1``: holding it back must not show the
    rest of the secret, which alone matches nothing (seen in a fresh-clone CI run)."""
    secret = "signing-only-in-file-126bd45c706bfc076af1"
    text = f"the token is {secret} (done)"
    # The pieces seen: "the token ", "is signing-…c706", "bfc076a", "f1", " (done)".
    shown, whole = stream(text, [10, 45, 52, 54], Scrubber([secret]))
    assert secret not in "".join(shown)
    assert whole == "the token is *** (done)"


def test_any_cut_of_secrets_and_listener_urls_shows_what_the_whole_text_would() -> None:
    """Every way of cutting the text into two or three pieces (and many into up to eight)
    shows exactly the text scrubbed whole: no secret or token, nothing lost or doubled."""
    secrets = ["signing-only-in-file-126bd45c706bfc076af1", "signing-only", "hunter2hunter2"]
    scrub = Scrubber(secrets)
    text = (
        "see http://127.0.0.1:41235/AbCdEfGhIjKlMnOpQrSt1/hook and "
        "signing-only-in-file-126bd45c706bfc076af1127.0.0.1:9/x hunter2hunter2"
    )
    expected = scrub(text)
    assert "***" in expected and not any(s in expected for s in secrets)

    def shown(cuts: list[int]) -> str:
        return stream(text, cuts, scrub)[1]

    for one in range(1, len(text)):
        assert shown([one]) == expected, one
        for two in range(one + 1, len(text), 7):
            assert shown([one, two]) == expected, (one, two)
    rng = random.Random(17)
    for _ in range(3000):
        cuts = rng.sample(range(1, len(text)), rng.randint(1, 7))
        assert shown(cuts) == expected, cuts
