"""The test modules' bytecode, written once by the xdist controller before its workers start.

pytest rewrites a test module's asserts when it imports it and caches the result in the
module's `__pycache__` (keyed by the source's hash). In a fresh clone none is there yet, and
every worker collects the whole suite at the same moment: each rewrote and compiled all ~600
test modules and the bridge's own itself (about 8.5 s of CPU per worker, twice what the rest of
its collection costs). The controller now writes them first, with pytest's own functions, so the
workers find them; an unchanged tree costs a hash of each file. Nothing a test runs changes: a
worker that finds no cached file (or one of another pytest) rewrites as before.
"""

from __future__ import annotations

import compileall
import re
import sys
from pathlib import Path

import pytest

# The modules pytest rewrites (python_files and conftest.py); the others are imported as usual.
_REWRITTEN = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")


def _rewrite(files: list[Path], config: pytest.Config) -> None:
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
    files = sorted(
        f
        for r in roots
        for f in ([r] if r.is_file() else r.rglob("*.py"))
        if f.suffix == ".py" and _REWRITTEN.search(f.as_posix())
    )
    _rewrite(files, config)
    # The helpers beside the tests and the bridge: ordinary bytecode, as an import writes it.
    for package in ("bridge", "tests"):
        compileall.compile_dir(root / package, quiet=2, rx=_REWRITTEN, workers=1)
