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

# Outside CI (docs/testing.md): `make fuzz FRAMES=1000000`, `make soak CYCLES=100`; SEED=n replays a run.
FRAMES ?= 100000
CYCLES ?= 100
SEED ?=

.PHONY: fuzz soak

fuzz: $(STAMP)
	$(BIN)/python tools/fuzz.py --frames $(FRAMES) $(if $(SEED),--seed $(SEED)) $(ARGS)

soak: $(STAMP)
	$(BIN)/python tools/soak.py --cycles $(CYCLES) $(if $(SEED),--seed $(SEED)) $(ARGS)

# The seeded whole-broker simulator (docs/testing.md, "Simulator"): `make sim SEEDS=200`,
# `make sim SEED=1234` replays one seed, `make sim HOURS=24` runs a campaign of simulated time.
SEEDS ?= 100
STEPS ?= 500
HOURS ?=

.PHONY: sim

sim: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m tests.sim --steps $(STEPS) $(if $(SEED),--seed $(SEED),$(if $(HOURS),--hours $(HOURS),--seeds $(SEEDS))) $(ARGS)

clean:
	rm -rf $(VENV) quafka-data .pytest_cache
