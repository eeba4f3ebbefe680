# Two entry points for a fresh machine with only Python 3.11+: `make run` and `make test`.
# Each creates (or reuses) its own virtualenv from the pinned lock files.
# The newest Python 3.11+ that actually runs (a pyenv shim can exist for a version that is not
# active); probed once.
# Exported: `make test`'s half a dozen sub-makes take the answer instead of probing again (each
# probe started up to four interpreters, pyenv's shims among them: about a second of wall
# before the venvs' installs began).
ifndef PYTHON
PYTHON := $(shell for p in python3.13 python3.12 python3.11 python3; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && { echo $$p; break; }; done)
endif
export PYTHON
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Synapse (the Matrix homeserver the tests start) lives in its own virtualenv: its dependency
# set differs from the bridge's.
SYNAPSE_VENV ?= .venv-synapse
SYNAPSE_STAMP := $(SYNAPSE_VENV)/.installed
CONFIG ?= config.toml

.PHONY: run test test-profile lint typecheck venv synapse postgres lock clean bench bubblewrap js-client \
	chromium

# uv installs both virtualenvs from the locks (about four times faster than pip, with a fraction of
# its CPU). uv itself is pinned in requirements-uv.lock and installed into the bridge's venv by
# the system's pip (`pip --python`), so the venv is made without a pip of its own: `venv`'s
# ensurepip took longer than uv's whole install of both venvs (docs/testing.md). Where the
# system has no pip (or one older than 22.3), ensurepip gives the venv one, as before; the pip
# fallback and `make mutate` give it one when they need it. Where uv cannot be installed or
# fails, pip installs the same pinned versions as before, and says so. uv reads none of pip's
# configuration (extra indexes, find-links, constraints): the locks name every package, and it installs from PyPI alone. Neither compiles
# bytecode at install (uv never does; pip is told not to): `make test` writes it as modules are
# first imported, for the few modules that are.
UV := $(BIN)/uv
UV_STAMP := $(VENV)/.uv
# The cache first: uv asks the index again about every package whose cached answer is ten
# minutes old (95 requests: 6.9 s of a 12.7 s install of .venv with a warm cache, and
# atomicwrites, an sdist whose download counted as changed, was rebuilt: 3.3 s more). The locks
# pin every version, so the cache alone gives the same install (2.4 s); where it lacks something
# (a first install, a changed lock) uv asks the network, as before.
UV_INSTALL = env -u UV_COMPILE_BYTECODE $(UV) pip install -q
UV_PIP = { $(UV_INSTALL) --offline $(1) 2>/dev/null || $(UV_INSTALL) $(1); }
PIP_INSTALL = -m pip install -q --disable-pip-version-check --no-compile
# The venv's own pip, made when something needs it (the pip fallback, `make mutate`).
ENSURE_PIP = { $(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip --default-pip >/dev/null; }

$(UV_STAMP): requirements-uv.lock
	@test -n "$(PYTHON)" || { echo "Python 3.11 or newer is needed (python3.11, python3.12 …)"; exit 1; }
	$(PYTHON) -m venv --without-pip $(VENV)
	@$(PYTHON) -m pip --python $(BIN)/python install -q --disable-pip-version-check --no-compile \
		-r requirements-uv.lock 2>/dev/null \
		|| { $(ENSURE_PIP) && $(BIN)/python $(PIP_INSTALL) -r requirements-uv.lock; } \
		|| { rm -f $(UV); echo "uv could not be installed: pip installs the virtualenvs (slower)"; }
	@touch $@

# The project goes in as a path in a .pth file (setuptools' "compat" editable mode), not as
# setuptools' default import hook: that hook's module imports pathlib, re, urllib.parse and
# importlib.util at the start of every Python process in the venv (about 20 ms of CPU each, in
# the thousand processes a test run starts: the simulator's, the bridge's, the workers').
EDITABLE_MODE = editable_mode=compat

$(STAMP): pyproject.toml requirements.lock requirements-dev.lock requirements-build.lock $(UV_STAMP)
	@if [ -x $(UV) ] && echo "uv: $(VENV) from requirements.lock, requirements-dev.lock" \
		&& $(call UV_PIP,--python $(BIN)/python -r requirements.lock -r requirements-dev.lock) \
		&& $(call UV_PIP,--python $(BIN)/python --no-deps -b requirements-build.lock \
			-C $(EDITABLE_MODE) -e .); then :; \
	else \
		if [ -x $(UV) ]; then echo "uv failed (above): pip installs $(VENV) instead (slower)"; fi; \
		echo "pip: $(VENV) from requirements.lock, requirements-dev.lock"; \
		$(ENSURE_PIP) && $(BIN)/python $(PIP_INSTALL) -r requirements.lock -r requirements-dev.lock \
			&& $(BIN)/python $(PIP_INSTALL) --no-deps --config-settings $(EDITABLE_MODE) -e . || exit 1; \
	fi
	@touch $(STAMP)

venv: $(STAMP)

# Synapse's venv needs no pip of its own with uv (the bridge's venv lends it uv: order-only, so a
# change of uv's pin does not reinstall Synapse); without uv it gets pip, as before.
$(SYNAPSE_STAMP): requirements-synapse.lock | $(UV_STAMP)
	@test -n "$(PYTHON)" || { echo "Python 3.11 or newer is needed"; exit 1; }
	@if [ -x $(UV) ] && echo "uv: $(SYNAPSE_VENV) from requirements-synapse.lock" \
		&& $(PYTHON) -m venv --without-pip $(SYNAPSE_VENV) \
		&& $(call UV_PIP,--python $(SYNAPSE_VENV)/bin/python -r requirements-synapse.lock); then :; \
	else \
		if [ -x $(UV) ]; then echo "uv failed (above): pip installs $(SYNAPSE_VENV) instead (slower)"; fi; \
		echo "pip: $(SYNAPSE_VENV) from requirements-synapse.lock"; \
		$(PYTHON) -m venv $(SYNAPSE_VENV) \
			&& $(SYNAPSE_VENV)/bin/python $(PIP_INSTALL) -r requirements-synapse.lock || exit 1; \
	fi
	@touch $(SYNAPSE_STAMP)

synapse: $(SYNAPSE_STAMP)

run: $(STAMP)
	@if [ -f "$(CONFIG)" ]; then \
		exec $(BIN)/agy-bridge run --config "$(CONFIG)"; \
	else \
		exec $(BIN)/agy-bridge console; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check bridge tests bench
	$(BIN)/ruff format --check bridge tests bench

# mypy's cache lives beside uv's and pip's, not in the clone: a cold mypy costs 13-17 s of CPU
# (a third of it the bridge, the rest the typed packages it imports), which in `make test` the
# test workers then lack; warm, 0.6 s. mypy compares each file's hash with the cache, so another
# clone, branch or worktree re-checks what differs and what depends on it, and nothing else.
# `make typecheck MYPY_CACHE=.mypy_cache` keeps one per clone.
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agy-bridge/mypy
typecheck: $(STAMP)
	@cache="$(MYPY_CACHE)"; mkdir -p "$$cache" 2>/dev/null && [ -w "$$cache" ] || cache=.mypy_cache; \
	echo "$(BIN)/mypy --cache-dir $$cache"; $(BIN)/mypy --cache-dir "$$cache"

# bubblewrap (agy's per-thread sandbox), slirp4netns (the sandbox's own network) and iproute2
# (which configures it) are system packages: installed when missing where we may (root with
# apt-get, as in CI). Elsewhere their tests are skipped, each saying why; with CI=true they fail
# instead. tools/system-packages.sh installs every missing part at once.
bubblewrap:
	@tools/system-packages.sh sandbox

# The independent Matrix client of the verification test (matrix-js-sdk with its Rust crypto,
# pinned in tests/chat/matrix/js/package-lock.json), installed from npm when Node is here
# (from npm's cache where it has the pinned versions: they never change); elsewhere that test
# says why it did not run.
JS_CLIENT = tests/chat/matrix/js
js-client:
	@if [ -d $(JS_CLIENT)/node_modules/matrix-js-sdk ]; then :; \
	elif command -v npm >/dev/null 2>&1; then \
		(cd $(JS_CLIENT) && npm ci --prefer-offline --no-audit --no-fund -q) \
			|| echo "matrix-js-sdk could not be installed: the verification test will not run"; \
	else echo "Node/npm are missing: the Matrix verification test will not run"; fi

# The tests start their own PostgreSQL (tests/pg.py) from the server's binaries. A fresh Debian
# machine (CI runs as root) gets Debian's package; elsewhere without them those tests say they
# did not run (and fail under CI=true).
postgres:
	@tools/system-packages.sh postgres

# The console's browser tests (tests/web/browser/) drive Debian's Chromium (its headless shell:
# the same engine at a fraction of the CPU) through its own chromedriver (Selenium is told both
# paths and never downloads a driver or a browser). Installed where we may (root with apt-get);
# elsewhere those tests are skipped, each saying why, and with CI=true they fail instead.
chromium:
	@tools/system-packages.sh browser

# The system packages the tests need, in one apt-get install (apt's locks: three installs side
# by side under make's jobserver failed now and then); beside them in `make test`: npm for the JS
# client (mostly network).
.PHONY: system-packages
system-packages:
	@tools/system-packages.sh sandbox postgres browser

# The suite runs over every core (pytest-xdist). Most tests wait on processes, sockets and rate
# limits, not the CPU: a worker per core kept only 1.25 of two cores busy, four workers 1.53, six
# 1.73 (on two cores, 2943 tests: 5 min 23 s of pytest with four workers, 4 min 42 s with six,
# docs/testing.md), so there are three workers per core, at most eight; worksteal evens out the
# long tail. The workers share one Synapse and one PostgreSQL (tests/shared_servers.py), so a
# worker more costs only its own start and collection; `make test PYTEST_WORKERS=4` tries fewer.
# The two virtualenvs install side by side (pip waits on the network and the disk); the apt-get steps
# stay one after the other (they share apt's lock). docs/testing.md says how the suite is split.
# The run ends with each worker's CPU time (children included) and fails when their total is
# above the budget written in docs/testing.md (tests/profiling.py): a change that makes the
# suite much costlier says so in its own CI run. `make test-profile` also lists each test's wall
# and CPU time.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( 3 * n < 8 ? 3 * n : 8 )))
PYTEST_ARGS ?= -n $(PYTEST_WORKERS) --dist worksteal --durations=20
CPU_BUDGET ?= docs/testing.md

# PYTHONDONTWRITEBYTECODE (set in some environments) would have every `python -m bridge` the
# tests start compile the bridge from source again (about 0.3 s of CPU each, hundreds of times)
# and every worker rewrite the test modules' asserts anew: the run writes its bytecode.
# The set-up waits mostly on the network and the disk: the system packages and npm's client
# install from the start (they need no uv: apt's download in CI's first run, npm's unpacking
# later, were the set-up's longest parts), Synapse's venv beside the bridge's once uv is in
# .venv (both venvs use it), and lint and mypy start as soon as the bridge's venv is there,
# niced, beside the rest of the set-up and then the tests (the workers leave a third of a core
# idle), into files printed after the tests' summary; `make test` fails if any of the three
# does. The test modules' rewritten bytecode (tests/bytecode.py: about 5 s of CPU in a fresh
# clone, over the cores) is written then too, beside the rest of the set-up, instead of by
# pytest's controller while its workers wait to start.
test:
	@checks=$$(mktemp -d); \
	$(MAKE) --no-print-directory -j2 --output-sync=target system-packages js-client \
		& packages=$$!; \
	$(MAKE) --no-print-directory $(UV_STAMP) || { wait; rm -rf $$checks; exit 1; }; \
	$(MAKE) --no-print-directory synapse & synapse=$$!; \
	$(MAKE) --no-print-directory venv; venv=$$?; lint=; typecheck=; \
	if [ $$venv = 0 ]; then \
		echo "lint and mypy run beside the rest of the set-up and the tests: their output follows"; \
		nice -n 10 $(MAKE) --no-print-directory lint >$$checks/lint 2>&1 & lint=$$!; \
		nice -n 10 $(MAKE) --no-print-directory typecheck >$$checks/typecheck 2>&1 & typecheck=$$!; \
		PYTHONDONTWRITEBYTECODE= $(BIN)/python -m tests.bytecode \
			|| echo "the tests' bytecode was not written ahead: pytest writes it"; \
	fi; \
	wait $$packages; packages=$$?; wait $$synapse; synapse=$$?; \
	if [ $$venv != 0 ] || [ $$packages != 0 ] || [ $$synapse != 0 ]; then \
		wait; rm -rf $$checks; echo "make test: the set-up failed (above)"; exit 1; fi; \
	PYTHONDONTWRITEBYTECODE= AGY_BRIDGE_SYNAPSE_PYTHON=$(abspath $(SYNAPSE_VENV))/bin/python \
		$(BIN)/python -m pytest $(PYTEST_ARGS) --cpu-budget=$(CPU_BUDGET); tests=$$?; \
	wait $$lint; lint=$$?; wait $$typecheck; typecheck=$$?; \
	echo "--- lint (ruff) ---"; cat $$checks/lint; echo "--- typecheck (mypy) ---"; \
	cat $$checks/typecheck; rm -rf $$checks; \
	[ $$lint = 0 ] || echo "make test: lint (ruff) failed"; \
	[ $$typecheck = 0 ] || echo "make test: typecheck (mypy) failed"; \
	[ $$tests = 0 ] && [ $$lint = 0 ] && [ $$typecheck = 0 ]

test-profile:
	@$(MAKE) --no-print-directory test PYTEST_ARGS="$(PYTEST_ARGS) --profile"

bench: $(STAMP)
	$(BIN)/python -m bench

lock:
	@echo "Regenerate: install the dependencies from pyproject.toml in a clean venv and pip freeze;"
	@echo "keep setuptools where a package needs it (pip freeze leaves it out; uv installs only the"
	@echo "locks). requirements-uv.lock and requirements-build.lock pin uv and setuptools by hand."

clean:
	rm -rf $(VENV) $(SYNAPSE_VENV) $(JS_CLIENT)/node_modules .pytest_cache .mypy_cache .ruff_cache

# Mutation testing of the modules that carry the bridge's promises (not part of CI): one slice
# at a time under a time budget, in a scratch copy (.mutate/). `make mutate SLICE=list` lists
# the slices; docs/testing.md has the scores. mutmut is installed on demand into the venv.
SLICE ?= list
MUTATE_BUDGET ?= 900
MUTATE_CHILDREN ?= 1
.PHONY: mutate
mutate: $(STAMP)
	@$(BIN)/python -c 'import mutmut' 2>/dev/null || { $(ENSURE_PIP) && \
		$(BIN)/python -m pip install -q --disable-pip-version-check 'mutmut==3.8.1'; }
	AGY_BRIDGE_SYNAPSE_PYTHON=$(abspath $(SYNAPSE_VENV))/bin/python \
		MUTATE_BUDGET=$(MUTATE_BUDGET) MUTATE_CHILDREN=$(MUTATE_CHILDREN) \
		nice -n 10 $(BIN)/python tools/mutate.py $(SLICE)
