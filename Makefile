# `make serve` and `make test` set up everything they need on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.deps-installed
PIP    := $(BIN)/python -m pip --disable-pip-version-check --quiet

.PHONY: serve test install schema clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.lock | $(BIN)/python
	$(PIP) install -r requirements.lock
	touch $(STAMP)

# The project itself: an editable install whose link tree lets type checkers
# resolve `trunkline.*` (the folders at the root map into that namespace).
install: $(STAMP)
	$(PIP) install --no-deps --no-build-isolation --config-settings editable_mode=strict -e .

serve: install
	$(BIN)/trunkline serve $(ARGS)

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

schema: install
	$(BIN)/python -m trunkline.protocol.schema
	$(BIN)/python -m trunkline.protocol.reference

clean:
	rm -rf $(VENV) build *.egg-info
