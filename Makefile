VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
REAL_STAMP := $(VENV)/.installed-real

.PHONY: install install-dev configured run chat test test-real lint fix bench bench-real clean

# A venv with a current pip: the one Python 3.11's venv brings (23.2) does not match extra
# names as PEP 685 says, so it misses justext's `lxml[html_clean]` (lxml spells it
# `html-clean`) and web_fetch fails without lxml_html_clean.
NEW_VENV := (test -x $(PY) || python3 -m venv $(VENV)) && $(PIP) install --quiet --upgrade pip

# What running needs: the package and its dependencies, no test tools.
$(RUN_STAMP): pyproject.toml constraints.txt
	$(NEW_VENV)
	$(PIP) install --quiet -c constraints.txt -e .
	touch $@

# Everything running needs and the test and lint tools, in one pip run (one resolver pass),
# so it stands for the run install too. --no-compile: pip would byte-compile every file it
# installs, torch's included (~80 s); Python compiles what is imported, once (`make test`
# writes bytecode).
$(DEV_STAMP): pyproject.toml constraints.txt
	$(NEW_VENV)
	$(PIP) install --quiet --no-compile -c constraints.txt -e '.[dev]'
	touch $@ $(RUN_STAMP)

# Also exports the embedding model to ONNX now, so the first start need not.
install: $(RUN_STAMP)
	$(VENV)/bin/mnemo memory prepare

install-dev: $(DEV_STAMP)

# A config, written by `mnemo init` the first time (it asks in a terminal, else takes its
# defaults), and the embedded demo model when that config needs it (built once, with progress).
configured: install
	@if [ ! -f config.toml ] && [ -z "$$MNEMO_CONFIG" ]; then \
		if [ -t 0 ]; then $(VENV)/bin/mnemo init; else $(VENV)/bin/mnemo init --yes; fi; \
	fi
	@$(VENV)/bin/mnemo embedded install --if-needed

run: configured
	$(VENV)/bin/mnemo run

chat: configured
	$(VENV)/bin/mnemo chat

# 4 workers on 2 cores pay: the suite mostly waits (mnemo processes, PostgreSQL, sockets).
# loadgroup keeps the tests that share one expensive fixture (xdist_group) on one worker.
TEST_WORKERS ?= 4

# Bytecode is written even where the shell says not to (PYTHONDONTWRITEBYTECODE): else every
# worker and every `mnemo` process compiles the checkout again, and pytest rewrites every
# test module's asserts again in each worker (~10 CPU-s a worker).
test: $(DEV_STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# llama-cpp-python builds from source the first time (~10 min on 2 cores); pip keeps the
# wheel in its cache, so later installs take seconds.
# CMAKE_ARGS: the same build flags `mnemo embedded install` gives (bots/demo_install.py:
# portable on x86-64, no AMX), unless the shell sets its own.
$(REAL_STAMP): $(DEV_STAMP)
	CMAKE_ARGS="$${CMAKE_ARGS-$$($(PY) -c 'from bots.demo_install import llama_cmake_args; print(llama_cmake_args())')}" \
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(PIP) install --quiet -c constraints.txt -e '.[dev,real]'
	touch $@

# End to end against real llama-cpp-python servers on 127.0.0.1 (SmolLM2-135M).
test-real: $(REAL_STAMP)
	$(PY) -m pytest -q -m real tests/real

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy core memory reflector migrations bots

fix: $(DEV_STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(DEV_STAMP)
	$(VENV)/bin/mnemo bench startup
	$(VENV)/bin/mnemo bench memory --n 10000
	$(VENV)/bin/mnemo bench memory --n 10000 --gap 1.5
	$(VENV)/bin/mnemo bench locomo ../shared/data/locomo/dev.json
	$(VENV)/bin/mnemo bench reflector
	$(VENV)/bin/mnemo bench longrun
	$(VENV)/bin/mnemo bench chaos
	$(VENV)/bin/mnemo bench scale
	$(VENV)/bin/mnemo bench web

# The benchmark that needs a real model server (the `real` extra, as for test-real).
bench-real: $(REAL_STAMP)
	$(VENV)/bin/mnemo bench kv
	$(VENV)/bin/mnemo bench kv --messages short

clean:
	rm -rf $(VENV)
