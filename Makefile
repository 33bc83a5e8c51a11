# `make serve` and `make test` set up everything they need on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.deps-installed
PIP    := $(BIN)/python -m pip --disable-pip-version-check --quiet

.PHONY: serve test lint install schema clean fuzz c-client conformance redis-server

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.lock | $(BIN)/python
	$(PIP) install -r requirements.lock
	touch $(STAMP)

# The project itself: an editable install whose link tree lets type checkers
# resolve `trunkline.*` (the folders at the root map into that namespace).
# Then its bytecode, written once here: pip compiles what it installs but not an
# editable tree, and where PYTHONDONTWRITEBYTECODE is set (containers, CI) every
# process (supervisor, fork server, each spawned worker, each CLI call) would compile
# all of trunkline from source at every start (about 70 ms of CPU each).
install: $(STAMP)
	$(PIP) install --no-deps --no-build-isolation --config-settings editable_mode=strict -e .
	$(BIN)/python -c "import compileall, pathlib, trunkline; \
	  compileall.compile_dir(pathlib.Path(trunkline.__file__).parent, quiet=1, workers=0) or exit(1)"

serve: install
	$(BIN)/trunkline serve $(ARGS)

# The conformance suite runs the C client too: install its libraries (apt-get, as root
# or with sudo; `apt-get update` only when the install fails without it) and build it.
# If that fails the rest still runs, and the C client's tests fail saying why: they
# never skip.
# Test processes (pytest-xdist): the suite mostly waits on the daemons it starts, so three
# share two cores well. `make test TEST_PROCESSES=0` runs it in one process.
TEST_PROCESSES ?= 3

# The lint runs first: CI (`.ci/run`, which is `make test`) fails on a finding before
# spending twenty minutes on the suite.
test: install lint
	@$(MAKE) c-client || echo "make test: could not install or build the C client; its tests will fail"
	@$(MAKE) redis-server || echo "make test: could not install redis-server; the shared-state tests will fail"
	@$(MAKE) node-sdks || echo "make test: could not install tests/node (npm); the Node SDK tests will fail"
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) $(PYTEST_ARGS)

# ruff (rules and formatter as pyproject.toml sets them) over the repository, then mypy
# over the installed package; CI runs it before the tests.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p trunkline

# The official Node SDKs the front door's tests drive (tests/node), from the npm registry
# at the versions its committed lock file holds; again only when that file changes.
NODE_SDKS := tests/node/node_modules/.package-lock.json
.PHONY: node-sdks
node-sdks: $(NODE_SDKS)
$(NODE_SDKS): tests/node/package-lock.json tests/node/package.json
	npm ci --prefix tests/node --no-audit --no-fund --loglevel=error

# The shared-state tests start real redis-servers (tests/redis_server.py): Debian's
# package, installed like the C client's libraries when it is missing.
redis-server:
	@if command -v redis-server >/dev/null 2>&1; then exit 0; fi; \
	SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	export DEBIAN_FRONTEND=noninteractive; \
	$$SUDO apt-get install -y --no-install-recommends redis-server \
	  || { $$SUDO apt-get update && $$SUDO apt-get install -y --no-install-recommends redis-server; }

c-client:
	$(MAKE) -C clients/c deps
	$(MAKE) -C clients/c

# The conformance scenarios against any client program (tests/conformance/README.md):
# `make conformance CLIENT="path/to/program args"`; the C client by default.
conformance: install c-client
	$(BIN)/python tests/conformance/driver.py -- $(or $(CLIENT),clients/c/build/tl conform)

# A long random campaign of arbitrary control messages at a live daemon (CI runs a
# fixed one of 2000): `make fuzz`, or `make fuzz N=100000`.
fuzz: install
	TRUNKLINE_FUZZ_EXAMPLES=$(or $(N),30000) TRUNKLINE_FUZZ_RANDOM=1 $(BIN)/python -m pytest tests/e2e/test_fuzz.py -q -s -p no:cacheprovider

schema: install
	$(BIN)/python -m trunkline.protocol.schema
	$(BIN)/python -m trunkline.protocol.reference
	$(BIN)/python -m trunkline.protocol.transcripts

clean:
	rm -rf $(VENV) build *.egg-info
	$(MAKE) -C clients/c clean

# Benchmark: trunkline vs. a direct httpx client (the floor) vs. LiteLLM (SDK, proxy, the
# SDK's Rust path) and the Portkey gateway, against one fake upstream; writes
# bench/results/latest.md. QUICK=1: seconds, tiny counts, uses the LiteLLM peers only if
# bench/.venv already exists. Portkey comes from npm into bench/portkey (node_modules). SOAK=MINUTES sets the soak
# (default 10). LiteLLM lives in its own venv, never in the project's.
.PHONY: bench
bench: install
	@if [ -z "$(QUICK)" ] && { [ ! -f bench/.venv/.deps-installed ] || [ bench/requirements.txt -nt bench/.venv/.deps-installed ]; }; then \
		echo "bench: setting up bench/.venv for the LiteLLM peers"; \
		{ [ -x bench/.venv/bin/python ] || python3.11 -m venv bench/.venv; } && \
		bench/.venv/bin/python -m pip --disable-pip-version-check --quiet install --no-deps -r bench/requirements.txt && \
		touch bench/.venv/.deps-installed || \
		echo "bench: could not set up bench/.venv; the LiteLLM peers will be skipped"; \
	fi
	@if [ -z "$(QUICK)" ] || [ ! -d bench/portkey/node_modules ]; then \
		npm ci --prefix bench/portkey --no-audit --no-fund --loglevel=error >/dev/null 2>&1 || \
		echo "bench: could not install bench/portkey (npm); the Portkey peer will be skipped"; \
	fi
	$(BIN)/python -m bench $(if $(QUICK),--quick) $(if $(SOAK),--soak $(SOAK)) $(BENCH_ARGS)
