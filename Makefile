# quafka — `make run` starts the broker, `make test` runs the whole suite.
# Both create .venv and install what is needed on first use (docs/install.md): `make run` the
# broker's dependencies only, `make test` adds the [test] and [spark] extras. `make dist` builds
# a wheel and an sdist into dist/.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Three stamps, each newer than the one it builds on: RUN_STAMP (the package and the broker's
# dependencies), STAMP (adds the [test] and [spark] extras: tests, lint, fuzz, soak, sim) and
# DEV_STAMP (adds [dev]: `build`, for `make dist`). Editing pyproject.toml redoes RUN_STAMP, and so
# every stamp after it.
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-test
DEV_STAMP := $(VENV)/.installed-dev
ARGS ?=
PYTEST_ARGS ?=
# `make run` serves the web dashboard here (docs/dashboard.md); `make run DASHBOARD=` turns it off
DASHBOARD ?= http://127.0.0.1:8080

.PHONY: run test lint clean dist

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

$(DEV_STAMP): $(RUN_STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(DEV_STAMP)

run: $(RUN_STAMP)
	@if [ -n "$(DASHBOARD)" ]; then echo "quafka: dashboard on $(DASHBOARD)/ (read-only; see docs/dashboard.md)"; fi
	$(BIN)/quafka broker --override quafka.dashboard.listener=$(DASHBOARD) $(ARGS)

dist: $(DEV_STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python tools/core_lint.py

test: lint
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=15 $(PYTEST_ARGS)

# Outside CI (docs/testing.md): `make fuzz FRAMES=1000000`, `make soak CYCLES=100`; SEED=n replays a run.
# `make load` (benchmarks/README.md): the load and churn scenarios, SCALE=0.1 for a smaller run, then
# examples/job_processor.py on issue 19's 20,000 jobs (CI runs 4,000).
FRAMES ?= 100000
CYCLES ?= 100
SEED ?=

SCALE ?= 1

.PHONY: fuzz soak load

fuzz: $(STAMP)
	$(BIN)/python tools/fuzz.py --frames $(FRAMES) $(if $(SEED),--seed $(SEED)) $(ARGS)

soak: $(STAMP)
	$(BIN)/python tools/soak.py --cycles $(CYCLES) $(if $(SEED),--seed $(SEED)) $(ARGS)

load: $(STAMP)
	$(BIN)/python benchmarks/load_churn.py --scale $(SCALE) $(if $(SEED),--seed $(SEED)) $(ARGS)
	QUAFKA_EXAMPLE_JOBS=20000 $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/framework/test_example_job_processor.py -k four_processes_of_four_workers

# The seeded whole-broker simulator (docs/testing.md, "Simulator"): `make sim SEEDS=200`,
# `make sim SEED=1234` replays one seed, `make sim HOURS=24` runs a campaign of simulated time.
SEEDS ?= 100
STEPS ?= 500
HOURS ?=

.PHONY: sim

sim: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m tests.sim --steps $(STEPS) $(if $(SEED),--seed $(SEED),$(if $(HOURS),--hours $(HOURS),--seeds $(SEEDS))) $(ARGS)

clean:
	rm -rf $(VENV) quafka-data .pytest_cache dist build
