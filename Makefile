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

.PHONY: run test lint clean dist browser

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

# Debian's Chromium and chromedriver for the dashboard's browser tests (docs/testing.md, "Browser
# tests"), installed with apt-get when either is missing (as root, or with passwordless sudo). This
# target never fails make: when they cannot be installed, the reason is kept in BROWSER_LOG and the
# browser tests fail with it (they never skip). No stamp: the two programs are the stamp, so a
# browser removed by hand comes back. `make run` does not need them and never installs them.
CHROMIUM ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver
BROWSER_LOG ?= $(VENV)/.browser-install.log
BROWSER_PACKAGES := chromium chromium-driver fonts-dejavu-core

browser:
	@if [ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ]; then rm -f $(BROWSER_LOG); exit 0; fi; \
	mkdir -p $(dir $(BROWSER_LOG)); reason=; sudo=; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  reason="no apt-get here (not Debian or Ubuntu): install Chromium as $(CHROMIUM) and chromedriver as $(CHROMEDRIVER)"; \
	elif [ "$$(id -u)" != 0 ]; then \
	  if sudo -n true 2>/dev/null; then sudo="sudo -n"; \
	  else reason="not root and no passwordless sudo: run 'sudo apt-get install $(BROWSER_PACKAGES)'"; fi; \
	fi; \
	if [ -z "$$reason" ]; then \
	  echo "make browser: installing $(BROWSER_PACKAGES) with apt-get"; \
	  { $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq \
	      --no-install-recommends $(BROWSER_PACKAGES); } > $(BROWSER_LOG).out 2>&1 \
	    || reason="apt-get update/install of $(BROWSER_PACKAGES) failed (its output follows)"; \
	  if [ -z "$$reason" ] && ! { [ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ]; }; then \
	    reason="apt-get installed $(BROWSER_PACKAGES) but $(CHROMIUM) or $(CHROMEDRIVER) is still missing"; fi; \
	fi; \
	if [ -z "$$reason" ]; then rm -f $(BROWSER_LOG) $(BROWSER_LOG).out; exit 0; fi; \
	{ echo "$$reason"; cat $(BROWSER_LOG).out 2>/dev/null; } > $(BROWSER_LOG); rm -f $(BROWSER_LOG).out; \
	echo "make browser: Chromium is not installed, so the browser tests will fail: $$reason ($(BROWSER_LOG))"

test: lint browser
	QUAFKA_BROWSER_LOG=$(abspath $(BROWSER_LOG)) $(BIN)/python -m pytest -n 2 --dist loadgroup --durations=15 $(PYTEST_ARGS)

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
