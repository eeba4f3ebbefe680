"""The test modules' bytecode, written once before the xdist workers start.

pytest rewrites a test module's asserts when it imports it and caches the result in the
module's `__pycache__` (keyed by the source's hash). In a fresh clone none is there yet, and
every worker collects the whole suite at the same moment: each rewrote and compiled all ~280
test modules and the bridge's own itself (about 8.5 s of CPU per worker, twice what the rest of
its collection costs). They are written first, with pytest's own functions, so the workers find
them; an unchanged tree costs a look at each file's cached header. Nothing a test runs changes:
a worker that finds no cached file (or one of another pytest) rewrites as before.

Rewriting is about 5 s of CPU in a fresh clone, which the workers wait for: the files are
shared out over the cores (forked processes, each its own share).

Two callers: `make test` runs ``python -m tests.bytecode`` as soon as the bridge's venv is
installed, beside the rest of the set-up (npm's client, Synapse's venv, the system packages),
so the pytest that follows finds it done; and the xdist controller's session start (this module
is a plugin of tests/conftest.py), for a `pytest -n` run started any other way.
"""

from __future__ import annotations

import compileall
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pytest

# The modules pytest rewrites (python_files and conftest.py); the others are imported as usual.
_REWRITTEN = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")
ROOT = Path(__file__).resolve().parent.parent
# Beyond a few processes the files are too few to share out usefully.
MAX_WAYS = 8


def _rewrite(files: Iterable[Path], config: pytest.Config) -> None:
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
    except (ImportError, AttributeError, KeyError):  # another pytest: the workers do it
        return
    for fn in files:
        cache_dir = rewrite.get_cache_dir(fn)
        pyc = cache_dir / (fn.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(fn, pyc) is not None or not rewrite.try_makedirs(cache_dir):
            continue
        try:
            source_hash, co = rewrite._rewrite_test(fn, config)
        except SyntaxError:  # reported by the worker that collects it
            continue
        rewrite._write_pyc(state, co, source_hash, pyc)


def _compile(files: Iterable[Path]) -> None:
    """Ordinary bytecode, as an import writes it (the helpers beside the tests, the bridge);
    a file whose bytecode is current is left alone."""
    for fn in files:
        compileall.compile_file(fn, quiet=2)


def shared_out(items: Sequence[Path], work: Callable[[Sequence[Path]], None], ways: int) -> None:
    """``work`` over ``items`` in ``ways`` processes at once, each its own share (every
    ``ways``-th item: the big and the small files mixed); the first share in this process.
    A share whose process fails is left to the workers, as a file that cannot be written is."""
    ways = max(1, min(ways, len(items)))
    children = []
    for k in range(1, ways):
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                work(items[k::ways])
                status = 0
            finally:
                os._exit(status)
        children.append(pid)
    try:
        work(items[0::ways])
    finally:
        for pid in children:
            os.waitpid(pid, 0)


def write(config: pytest.Config, roots: Iterable[Path], ways: int = 0) -> None:
    """The rewritten test modules under ``roots`` and the plain bytecode of the bridge and the
    test helpers, in ``ways`` processes (by default one per core)."""
    tests = sorted(
        f
        for r in roots
        for f in ([r] if r.is_file() else r.rglob("*.py"))
        if f.suffix == ".py" and _REWRITTEN.search(f.as_posix())
    )
    plain = sorted(
        f
        for package in ("bridge", "tests")
        for f in (config.rootpath / package).rglob("*.py")
        if not _REWRITTEN.search(f.as_posix())
    )
    files = tests + plain
    rewritten = set(tests)

    def work(share: Sequence[Path]) -> None:
        _rewrite([f for f in share if f in rewritten], config)
        _compile([f for f in share if f not in rewritten])

    shared_out(files, work, ways or min(os.cpu_count() or 1, MAX_WAYS))


@pytest.hookimpl(tryfirst=True)  # before xdist's, which starts the workers
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if (
        hasattr(config, "workerinput")
        or not config.getoption("numprocesses", None)
        or config.getoption("assertmode", "rewrite") != "rewrite"
        or sys.dont_write_bytecode
    ):
        return
    root, here = config.rootpath, config.invocation_params.dir
    roots = {(here / arg.split("::")[0]).resolve() for arg in config.args} or {root / "tests"}
    write(config, roots)


def main() -> int:
    """`python -m tests.bytecode`: the whole suite's bytecode, before pytest starts (`make test`).
    pytest's configuration (the rootdir, pyproject's options) without the conftests: nothing of
    the bridge is imported, only compiled."""
    if sys.dont_write_bytecode:
        return 0
    from _pytest.config import _prepareconfig

    # Never configured (no plugin ran its configure), so nothing to unconfigure at the end.
    config = _prepareconfig(["--noconftest", "-p", "no:cacheprovider", str(ROOT / "tests")])
    write(config, [ROOT / "tests"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
