# quafka — `make run` starts the broker, `make test` runs the whole suite.
# Both create .venv and install what is needed on first use.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/quafka broker $(ARGS)

lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python tools/core_lint.py

test: lint
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=15 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) quafka-data .pytest_cache
